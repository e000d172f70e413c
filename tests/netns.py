"""Several "nodes" on one machine: network namespaces joined by a bridge (in a namespace of its own,
so the machine's own network is untouched), node i at 10.213.S.(i+1) on its device. Needs root and
iproute2; cannot_run() says why where namespaces cannot be made."""

import os
import shutil
import subprocess

from proc import cannot_run


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, timeout=30)


class Nodes:
    def __init__(self, count):
        tag = os.getpid() % 100000
        self.ns = [f"dpt{tag}n{i}" for i in range(count)]
        self.dev = [f"dpt{tag}v{i}" for i in range(count)]
        self.bridge_ns = f"dpt{tag}br"
        subnet = 10 + tag % 200
        self.addr = [f"10.213.{subnet}.{i + 1}" for i in range(count)]
        if os.geteuid() != 0:
            cannot_run("network namespaces need root")
        if shutil.which("ip") is None:
            cannot_run("iproute2's 'ip' is not installed")
        try:
            sh("ip", "netns", "add", self.bridge_ns)
            sh("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
            for i, (ns, dev, addr) in enumerate(zip(self.ns, self.dev, self.addr)):
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
                sh("ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", f"port{i}", "netns",
                   self.bridge_ns)
                sh("ip", "-n", self.bridge_ns, "link", "set", f"port{i}", "master", "br0")
                sh("ip", "-n", self.bridge_ns, "link", "set", f"port{i}", "up")
                sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
        except (subprocess.CalledProcessError, OSError) as e:
            self.close()
            detail = e.stderr.decode().strip() if getattr(e, "stderr", None) else str(e)
            cannot_run(f"cannot create network namespaces here: {detail}")

    def cut(self, index):
        """Takes node `index`'s port on the bridge down: its packets go nowhere and nothing closes
        a connection, as when a machine loses power or its network."""
        sh("ip", "-n", self.bridge_ns, "link", "set", f"port{index}", "down")

    def run_in(self, index, args):
        """`args` as a command line run inside node `index`'s namespace."""
        return ["ip", "netns", "exec", self.ns[index], *args]

    def close(self):
        for ns in [*self.ns, self.bridge_ns]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

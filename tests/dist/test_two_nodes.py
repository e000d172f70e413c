"""Two "nodes" on one machine: two network namespaces joined by a veth pair, one `dptrain launch`
in each (--nnodes 2 --node-rank 0/1), the master in the first, collectives across the link.
Needs root and iproute2; skips, saying why, where namespaces cannot be made."""

import os
import shutil
import subprocess
import unittest

from proc import Started, cannot_run, dptrain


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, timeout=30)


class TwoNodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tag = os.getpid() % 100000
        cls.ns = [f"dpt{tag}a", f"dpt{tag}b"]
        cls.dev = [f"dpt{tag}va", f"dpt{tag}vb"]
        subnet = 10 + tag % 200
        cls.addr = [f"10.213.{subnet}.1", f"10.213.{subnet}.2"]
        if os.geteuid() != 0:
            cannot_run("network namespaces need root")
        if shutil.which("ip") is None:
            cannot_run("iproute2's 'ip' is not installed")
        try:
            for ns in cls.ns:
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", cls.dev[0], "netns", cls.ns[0], "type", "veth", "peer", "name", cls.dev[1],
               "netns", cls.ns[1])
            for ns, dev, addr in zip(cls.ns, cls.dev, cls.addr):
                sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
        except (subprocess.CalledProcessError, OSError) as e:
            cls.tearDownClass()
            detail = e.stderr.decode().strip() if getattr(e, "stderr", None) else str(e)
            cannot_run(f"cannot create network namespaces here: {detail}")

    @classmethod
    def tearDownClass(cls):
        for ns in cls.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

    def node(self, index):
        return Started(["ip", "netns", "exec", self.ns[index], dptrain(), "launch", "--nnodes", "2", "--node-rank",
                        str(index), "--nproc-per-node", "2", "--master-addr", self.addr[0], "--master-port", "29400",
                        "--", dptrain(), "check", "--timeout", "60", "--interface", self.dev[index]])

    def test_collectives_across_the_link(self):
        nodes = [self.node(0), self.node(1)]
        try:
            results = [n.wait(timeout=120) for n in nodes]
        finally:
            for n in nodes:
                n.close()
        for index, (code, out, err) in enumerate(results):
            self.assertEqual(code, 0, f"node {index}:\n{out}\n{err}")
            for rank in (2 * index, 2 * index + 1):
                # Ranks on two nodes: Gloo alone, no shared memory.
                self.assertIn(f"[rank {rank}] rank {rank}/4: 11 collectives correct on gloo (", out)
                self.assertIn(f"(local {rank % 2}/2, node {index})", out)
        self.assertIn(f"master {self.addr[0]}:29400", results[1][1])


if __name__ == "__main__":
    unittest.main()

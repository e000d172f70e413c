"""What a running job exposes, read from the kernel (docs/security.md): during a 2-rank
`dptrain launch --standalone` training run, every TCP socket of the job's processes that listens
does so on loopback, except the rendezvous store on LibTorch 1.x, which cannot be bound to one
address and listens on every interface (and `dptrain check` warns about it); the shared-memory
segment is invisible in /dev/shm while the job runs and after it was killed with SIGKILL."""

import json
import os
import re
import signal
import socket
import struct
import time
import unittest

from proc import Started, descendants, dptrain, run
from train_runs import alone

LISTEN = "0A"


def listening_sockets():
    """{socket inode: "address:port"} of every TCP socket listening in this network namespace."""
    found = {}
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] != LISTEN:
                    continue
                hex_address, hex_port = fields[1].split(":")
                words = [int(hex_address[i:i + 8], 16) for i in range(0, len(hex_address), 8)]
                packed = b"".join(struct.pack("=I", w) for w in words)  # each word in host order
                found[fields[9]] = f"{socket.inet_ntop(family, packed)}:{int(hex_port, 16)}"
    return found


def socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return inodes


def is_loopback(address):
    host = address.rsplit(":", 1)[0]
    return host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1") or host.startswith("::ffff:127.")


def our_segments():
    return [name for name in os.listdir("/dev/shm") if name.startswith("dptrain-")]


class Exposure(unittest.TestCase):
    def libtorch_major(self):
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "check",
                              "--timeout", "60"], timeout=120)
        self.assertEqual(code, 0, out + err)
        report = json.loads([line for line in out.splitlines() if line.startswith("[rank 0] {")][0][len("[rank 0] "):])
        return int(report["compute"]["libtorch"].split(".")[0]), report, err

    def test_dptrain_check_says_where_the_store_listens(self):
        major, report, err = self.libtorch_major()
        # (and how idle OpenMP threads wait: ctest starts every test with them asleep)
        self.assertIs(report["compute"]["openmp_threads_sleep"], os.environ.get("OMP_WAIT_POLICY") == "passive")
        if major >= 2:
            self.assertEqual(report["store_listens_on"], ["127.0.0.1"])
            self.assertNotIn("accepts connections on every interface", err)
        else:
            self.assertTrue(report["store_listens_on"], report)
            self.assertTrue(all(a in ("0.0.0.0", "::") for a in report["store_listens_on"]), report)
            self.assertRegex(err, r"warning: the rendezvous store accepts connections on every interface \(LibTorch "
                                  r"1\.\d+\.\d+ cannot bind it to one address\)")

    def test_a_standalone_training_run_listens_on_loopback_only(self):
        major = self.libtorch_major()[0]
        before = set(our_segments())
        started = Started([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                           "--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "2048", "-b",
                           "16", "-j", "1", "--epochs", "3", "-p", "5"], env=alone())
        try:
            deadline = time.monotonic() + 120
            line = ""
            while time.monotonic() < deadline and not re.search(r"Epoch: \[0\]\[ ?6/", line):
                line = started.proc.stdout.readline()
                self.assertTrue(line, "the run ended before its sixth step")
            listening = listening_sockets()
            tree = {started.proc.pid, *descendants(started.proc.pid)}
            self.assertGreaterEqual(len(tree), 3, tree)  # the launcher and two ranks
            ours = sorted(listening[inode] for pid in tree for inode in socket_inodes(pid) if inode in listening)
            ports = set()
            for pid in tree:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
                if b"RANK" in env:  # a worker (the test's own environment may name a port too)
                    ports.add(int(env[b"MASTER_PORT"]))
            self.assertEqual(len(ports), 1, ports)
            port = ports.pop()
            # The rendezvous store listens, and is found listening: a look that found no socket at
            # all (none read, or the wrong namespace) would prove nothing of where it listens.
            self.assertIn(port, {int(a.rsplit(":", 1)[1]) for a in ours}, ours)
            exposed = [a for a in ours if not is_loopback(a)]
            if major >= 2:
                self.assertEqual(exposed, [], ours)
            else:
                # Only the store, on every interface: LibTorch 1.x cannot bind it to one address.
                self.assertEqual(len(exposed), 1, ours)
                host, exposed_port = exposed[0].rsplit(":", 1)
                self.assertIn(host, ("::", "0.0.0.0"))
                self.assertEqual(int(exposed_port), port)
            self.assertEqual(set(our_segments()) - before, set(), "a shared-memory segment is visible")
            # SIGKILL to every process of the job: nothing of it stays in /dev/shm.
            for pid in tree:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            started.wait(timeout=30)
            self.assertEqual(set(our_segments()) - before, set())
        finally:
            started.close()


if __name__ == "__main__":
    unittest.main()

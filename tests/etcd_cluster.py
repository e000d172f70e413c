"""A real etcd cluster on loopback for one test (Debian's etcd-server, scripts/install-deps), the
Python twin of tests/support/etcd_cluster.h: each member a process on free ports with its data in a
temporary folder, killed by PID and reaped on the way out."""

import os
import shutil
import signal
import subprocess
import tempfile
import time

from proc import cannot_run, free_port

ETCD = "/usr/bin/etcd"


class EtcdCluster:
    """`members` etcd members; member m listens on hosts[m] (default 127.0.0.1) and runs as
    run_in[m](command line) (default: as it is; a network namespace's `ip netns exec` for a node of
    bench/netns_link.py's link)."""

    def __init__(self, members, hosts=None, run_in=None):
        self.members = members
        self.hosts = hosts or ["127.0.0.1"] * members
        self.run_in = run_in or [lambda args: args] * members
        self.procs = []
        self.endpoints = []

    def __enter__(self):
        if not os.access(ETCD, os.X_OK):
            cannot_run(f"{ETCD} is missing (Debian's etcd-server; scripts/install-deps installs it)")
        self.dir = tempfile.mkdtemp(prefix="dpt_etcd_")
        # Free here; a namespace's ports are all free.
        ports = [(free_port(), free_port()) for _ in range(self.members)]
        initial = ",".join(f"m{m}=http://{host}:{peer}" for m, (host, (_, peer)) in enumerate(zip(self.hosts, ports)))
        try:
            for m, (host, (client, peer)) in enumerate(zip(self.hosts, ports)):
                self.endpoints.append(f"{host}:{client}")
                with open(os.path.join(self.dir, f"m{m}.log"), "w") as log:
                    self.procs.append(subprocess.Popen(self.run_in[m](
                        [ETCD, "--name", f"m{m}", "--data-dir", os.path.join(self.dir, f"m{m}"),
                         "--listen-client-urls", f"http://{host}:{client}",
                         "--advertise-client-urls", f"http://{host}:{client}",
                         "--listen-peer-urls", f"http://{host}:{peer}",
                         "--initial-advertise-peer-urls", f"http://{host}:{peer}",
                         "--initial-cluster", initial, "--initial-cluster-state", "new",
                         "--initial-cluster-token", "dptrain-test"]),
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            self.wait_healthy(timeout=30)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def wait_healthy(self, timeout):
        """Returns once every member says it is healthy (a leader elected), within `timeout` s; each
        asked from where it runs (curl, inside its namespace)."""
        deadline = time.monotonic() + timeout
        for m, endpoint in enumerate(self.endpoints):
            while True:
                asked = subprocess.run(self.run_in[m](["curl", "-s", "-m", "1", f"http://{endpoint}/health"]),
                                       capture_output=True, text=True, timeout=10)
                if '"true"' in asked.stdout:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"etcd member {endpoint} not healthy within {timeout} s: {self.log()}")
                time.sleep(0.1)

    def kill(self, member):
        """SIGKILL to one member, reaped."""
        proc = self.procs[member]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    def log(self):
        return "".join(open(os.path.join(self.dir, f"m{m}.log")).read()[-2000:] for m in range(len(self.procs)))

    def __exit__(self, *exc):
        for member in range(len(self.procs)):
            self.kill(member)
        shutil.rmtree(self.dir, ignore_errors=True)

"""A real etcd cluster on loopback for one test (Debian's etcd-server, scripts/install-deps), the
Python twin of tests/support/etcd_cluster.h: each member a process on free ports with its data in a
temporary folder, killed by PID and reaped on the way out."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from proc import cannot_run, free_port

ETCD = "/usr/bin/etcd"


class EtcdCluster:
    def __init__(self, members):
        self.members = members
        self.procs = []
        self.endpoints = []

    def __enter__(self):
        if not os.access(ETCD, os.X_OK):
            cannot_run(f"{ETCD} is missing (Debian's etcd-server; scripts/install-deps installs it)")
        self.dir = tempfile.mkdtemp(prefix="dpt_etcd_")
        ports = [(free_port(), free_port()) for _ in range(self.members)]
        initial = ",".join(f"m{m}=http://127.0.0.1:{peer}" for m, (_, peer) in enumerate(ports))
        try:
            for m, (client, peer) in enumerate(ports):
                self.endpoints.append(f"127.0.0.1:{client}")
                with open(os.path.join(self.dir, f"m{m}.log"), "w") as log:
                    self.procs.append(subprocess.Popen(
                        [ETCD, "--name", f"m{m}", "--data-dir", os.path.join(self.dir, f"m{m}"),
                         "--listen-client-urls", f"http://127.0.0.1:{client}",
                         "--advertise-client-urls", f"http://127.0.0.1:{client}",
                         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                         "--initial-cluster", initial, "--initial-cluster-state", "new",
                         "--initial-cluster-token", "dptrain-test"],
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            self.wait_healthy(timeout=30)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def wait_healthy(self, timeout):
        """Returns once every member says it is healthy (a leader elected), within `timeout` s."""
        deadline = time.monotonic() + timeout
        for endpoint in self.endpoints:
            while True:
                try:
                    with urllib.request.urlopen(f"http://{endpoint}/health", timeout=1) as answer:
                        if b'"true"' in answer.read():
                            break
                except OSError:
                    pass
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

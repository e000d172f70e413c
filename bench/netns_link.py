"""Two network namespaces joined by a link whose ends are shaped with tc, for the benchmarks that
measure over a link slower than this machine's memory (bench/ddp_net, bench/remote_shards, ...).
Without a delay the link is a veth pair; with one it is bench/delay_line.py's pair of TUN devices,
which holds each packet for the delay in user space (this kernel has no sch_netem). Needs root and
iproute2; the namespaces, and the delay line, are gone on the way out, also on failure."""
import os
import re
import signal
import subprocess
import sys
import time

DELAY_LINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "delay_line.py")
# tc's rate units (tc(8)): bits per second, or bytes per second with "bps".
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
              "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}


def sh(*args):
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")


class Link:
    """Namespaces ns[0] and ns[1] at addr[0] and addr[1], each end's egress shaped to `rate` with a
    token bucket of `burst` (tc tbf); with `delay_ms`, each packet arrives that much later (half
    the round trip each way)."""

    def __init__(self, rate, burst, delay_ms=0.0):
        tag = os.getpid() % 100000
        self.ns = [f"dptn{tag}a", f"dptn{tag}b"]
        self.dev = [f"dptn{tag}va", f"dptn{tag}vb"]
        self.addr = ["10.213.250.1", "10.213.250.2"]  # only inside these namespaces
        self.rate = rate
        self.burst = burst
        self.delay_ms = delay_ms
        self.delay_line = None

    def payload_mb_s(self):
        """The most TCP payload the shaped link carries, MB/s (10^6 bytes): its rate less each
        packet's headers. tbf counts a full packet as 1500 bytes of IP carrying 1448 of payload (TCP
        with timestamps), plus 14 of Ethernet header on the veth pair (TUN devices carry bare IP)."""
        number, unit = re.fullmatch(r"([0-9.]+)([a-z]+)", self.rate.lower()).groups()
        frame = 1500 + (0 if self.delay_ms else 14)
        return float(number) * RATE_UNITS[unit] / 8 * 1448 / frame / 1e6

    def __enter__(self):
        try:
            for ns in self.ns:
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            if self.delay_ms:
                self._start_delay_line()
            else:
                sh("ip", "link", "add", self.dev[0], "netns", self.ns[0], "type", "veth", "peer", "name",
                   self.dev[1], "netns", self.ns[1])
            for ns, dev, addr in zip(self.ns, self.dev, self.addr):
                sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                   "burst", self.burst, "latency", "50ms")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start_delay_line(self):
        """The delay line creates both TUN devices here; each then moves into its namespace (the
        line's descriptors follow it there). Its standard input is ours: it ends when we do."""
        self.delay_line = subprocess.Popen([sys.executable, DELAY_LINE, *self.dev, str(self.delay_ms)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.delay_line.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{DELAY_LINE} did not start (exit status {self.delay_line.wait(10)})")
        for ns, dev in zip(self.ns, self.dev):
            sh("ip", "link", "set", dev, "netns", ns)

    def run_in(self, index, args):
        """`args` as a command line run inside namespace `index`."""
        return ["ip", "netns", "exec", self.ns[index], *args]

    def connect_ms(self, port, tries=1):
        """The median time namespace 1 takes to connect to addr[0]:`port` over `tries` connections:
        one round trip, the delay line's included. None when nothing listens there."""
        probe = ("import socket, statistics, time\n"
                 "times = []\n"
                 f"for _ in range({tries}):\n"
                 "    start = time.perf_counter()\n"
                 f"    socket.create_connection(('{self.addr[0]}', {port}), 5).close()\n"
                 "    times.append(time.perf_counter() - start)\n"
                 "print(statistics.median(times) * 1000)")
        out = subprocess.run(self.run_in(1, [sys.executable, "-c", probe]), capture_output=True, text=True, timeout=60)
        return float(out.stdout) if out.returncode == 0 else None

    def start_server(self, args, port, log):
        """`args` run in namespace 0, its output in `log`, in a session of its own (the caller kills
        its group); returned once namespace 1 connects to addr[0]:`port`."""
        with open(log, "w") as out:
            process = subprocess.Popen(self.run_in(0, args), stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        deadline = time.monotonic() + 30
        while self.connect_ms(port) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                raise RuntimeError(f"{args[0]} did not listen on port {port} within 30 s: {open(log).read()}")
            time.sleep(0.1)
        return process

    def unshape(self):
        """Removes the rate's shaping: the link then runs at the speed of memory copies (still
        delayed when it has a delay)."""
        for ns, dev in zip(self.ns, self.dev):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root")

    def __exit__(self, *_):
        if self.delay_line is not None:
            self.delay_line.terminate()
            self.delay_line.wait(10)
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

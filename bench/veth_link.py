"""Two network namespaces joined by a veth pair whose ends are shaped with tc, for the benchmarks
that measure over a link slower than this machine's memory (bench/ddp_net, bench/remote_shards).
Needs root and iproute2; the namespaces are deleted on the way out, also on failure."""
import os
import subprocess


def sh(*args):
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")


class Link:
    """Namespaces ns[0] and ns[1] at addr[0] and addr[1], each end's egress shaped to `rate` with a
    token bucket of `burst` (tc tbf), behind `delay_ms` of netem delay when given (half the round
    trip each way)."""

    def __init__(self, rate, burst, delay_ms=0.0):
        tag = os.getpid() % 100000
        self.ns = [f"dptn{tag}a", f"dptn{tag}b"]
        self.dev = [f"dptn{tag}va", f"dptn{tag}vb"]
        self.addr = ["10.213.250.1", "10.213.250.2"]  # only inside these namespaces
        self.rate = rate
        self.burst = burst
        self.delay_ms = delay_ms

    def __enter__(self):
        try:
            for ns in self.ns:
                sh("ip", "netns", "add", ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", self.dev[0], "netns", self.ns[0], "type", "veth", "peer", "name", self.dev[1],
               "netns", self.ns[1])
            for ns, dev, addr in zip(self.ns, self.dev, self.addr):
                sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
                sh("ip", "-n", ns, "link", "set", dev, "up")
                # netem holds packets for the delay, then hands them to the token bucket.
                tbf_parent = ["root"]
                if self.delay_ms:
                    try:
                        sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:",
                           "netem", "delay", f"{self.delay_ms}ms", "limit", "100000")
                    except RuntimeError as e:
                        raise RuntimeError(f"{e}\nthis kernel cannot delay packets (no sch_netem): measure without "
                                           "the delay (--delay-ms 0)") from None
                    tbf_parent = ["parent", "1:1"]
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, *tbf_parent, "tbf", "rate", self.rate,
                   "burst", self.burst, "latency", "50ms")
        except BaseException:
            self.__exit__()
            raise
        return self

    def run_in(self, index, args):
        """`args` as a command line run inside namespace `index`."""
        return ["ip", "netns", "exec", self.ns[index], *args]

    def unshape(self):
        """Removes the shaping: the veth pair then runs at the speed of memory copies."""
        for ns, dev in zip(self.ns, self.dev):
            sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root")

    def __exit__(self, *_):
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)

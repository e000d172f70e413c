"""Every way a job's start can go wrong ends every process with one line naming the rank, the
operation and what to do, and a nonzero exit, within the timeout; and the three init methods work."""

import os
import socket
import tempfile
import time
import unittest

from proc import Started, dptrain, env_with, free_port, run


def check(rank, world, port, timeout=5, *extra):
    env = env_with(RANK=rank, WORLD_SIZE=world, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    return Started([dptrain(), "check", "--timeout", str(timeout), *extra], env=env)


def finish_all(started, timeout=60):
    results = []
    try:
        for s in started:
            results.append(s.wait(timeout))
    finally:
        for s in started:
            s.close()
    return results


class StartupFailures(unittest.TestCase):
    def test_rank_outside_the_world(self):
        code, _, err = run([dptrain(), "check"], timeout=30, env=env_with(RANK=2, WORLD_SIZE=2))
        self.assertEqual(code, 2)
        self.assertIn("rank 2 is outside the world of 2 processes (valid ranks: 0..1)", err)

    def test_mismatched_world_sizes_fail_on_both_ranks_without_waiting(self):
        port = free_port()
        t0 = time.monotonic()
        (c0, _, e0), (c1, _, e1) = finish_all([check(0, 2, port, 60), check(1, 3, port, 60)])
        self.assertLess(time.monotonic() - t0, 30, "must not wait for the 60 s timeout")
        self.assertEqual((c0, c1), (2, 2))
        self.assertIn("rank 0: rank 1 was started with world size 3 but this rank with 2", e0)
        self.assertIn("rank 1: rank 0 was started with world size 2 but this rank with 3", e1)

    def test_missing_rank_is_named_after_the_timeout(self):
        t0 = time.monotonic()
        [(code, _, err)] = finish_all([check(0, 3, free_port(), 2)])
        self.assertEqual(code, 1)
        self.assertIn("rank 0: rendezvous timed out after 2 s: 1 of 3 ranks joined; missing rank(s) 1, 2.", err)
        self.assertLess(time.monotonic() - t0, 30)

    def test_unreachable_master(self):
        [(code, _, err)] = finish_all([check(1, 2, free_port(), 2)])
        self.assertEqual(code, 1)
        self.assertIn("rank 1: could not reach the master at 127.0.0.1:", err)
        self.assertIn("within 2 s", err)

    def test_busy_port(self):
        with socket.socket() as holder:
            holder.bind(("0.0.0.0", 0))
            holder.listen()
            port = holder.getsockname()[1]
            [(code, _, err)] = finish_all([check(0, 2, port, 5)])
        self.assertEqual(code, 1)
        self.assertIn(f"rank 0: cannot start the rendezvous store on port {port}: the port is busy", err)

    def test_unknown_init_method(self):
        code, _, err = run([dptrain(), "check", "--dist-url", "udp://x:1"], timeout=30)
        self.assertEqual(code, 2)
        self.assertIn("unknown init method 'udp://x:1'", err)


class InitMethods(unittest.TestCase):
    def run_pair(self, *flags):
        started = [Started([dptrain(), "check", "--timeout", "60", "--world-size", "2", "--rank", str(r), *flags],
                           env=env_with(RANK=None, WORLD_SIZE=None))
                   for r in range(2)]
        results = finish_all(started)
        for code, out, err in results:
            self.assertEqual(code, 0, err)
        self.assertIn("rank 1/2: 11 collectives correct", results[1][1])

    def test_tcp(self):
        self.run_pair("--dist-url", f"tcp://127.0.0.1:{free_port()}")

    def test_file(self):
        with tempfile.TemporaryDirectory() as shared:
            self.run_pair("--dist-url", f"file://{shared}/rendezvous")

    def test_env_with_flags(self):
        self.run_pair("--master-addr", "127.0.0.1", "--master-port", str(free_port()))


if __name__ == "__main__":
    unittest.main()

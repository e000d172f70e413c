"""Every way a job's start can go wrong ends every process with one line naming the rank, the
operation and what to do, and a nonzero exit, within the timeout; and the three init methods work.
The classic hangs of a running job (a rank that skips a collective, ranks that disagree on a shape,
a rank stopped or killed) end the same way, over Gloo and over shared memory, and the launcher's
last line says who failed and why."""

import socket
import tempfile
import time
import unittest

from proc import Started, dptrain, env_with, free_port, program, run


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
        self.assertIn("rank 1: could not reach the master (rank 0) at 127.0.0.1:", err)
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



class Divergence(unittest.TestCase):
    """dptrain_collective_probe on 2 ranks: rank 1 does one thing wrong at step 5 of 12."""

    TIMEOUT = 3

    def diverge(self, fault, shared_memory):
        t0 = time.monotonic()
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--",
                              program("dptrain_collective_probe"), "--fault", fault, "--timeout", str(self.TIMEOUT)],
                             timeout=90, env=env_with(DPTRAIN_SHM=int(shared_memory)))
        # The timeout, the survey's grace (as long as the timeout here) and the launcher's 5 s
        # grace for a stopped worker, with room for a slow machine.
        self.assertLess(time.monotonic() - t0, 2 * self.TIMEOUT + 5 + 20)
        self.assertNotIn("steps done", out)
        summary = err.strip().splitlines()[-1]
        return code, err, summary

    def assert_both_ranks_say(self, err, pattern):
        for rank in (0, 1):
            self.assertRegex(err, rf"\[rank {rank}\] error: " + pattern.replace("RANK", str(rank)))

    def check_disagreement(self, fault, shared_memory, rank1_has):
        code, err, summary = self.diverge(fault, shared_memory)
        self.assertEqual(code, 1, err)
        if shared_memory:
            head = r"rank RANK: all_reduce over shared memory: the ranks disagree on what they reduce: every rank"
            mine, theirs = "all_reduce(sum) of 64 Float step 5", f"all_reduce(sum) of {rank1_has}"
        else:
            head = r"rank RANK: the ranks disagree on collective #6 \(all_reduce\(sum\)\): every rank"
            mine, theirs = "#6 all_reduce(sum) [64] Float step 5", f"#6 all_reduce(sum) {rank1_has}"
        self.assert_both_ranks_say(err, head)
        # Line by line: the launcher passes on whole lines, but the two ranks' lines may interleave.
        for rank in (0, 1):
            self.assertIn(f"[rank {rank}]     rank 0: {mine}\n", err)
            self.assertIn(f"[rank {rank}]     rank 1: {theirs}\n", err)
        self.assertRegex(summary, r"^dptrain launch: exit 1: rank [01] exited with code 1: error: " +
                         head.replace("RANK", "[01]"))

    def test_a_skipped_collective_names_both_steps(self):
        self.check_disagreement("skip", shared_memory=False, rank1_has="[64] Float step 6")
        self.check_disagreement("skip", shared_memory=True, rank1_has="64 Float step 6")

    def test_a_shape_that_differs_names_both_shapes(self):
        # Unchecked, Gloo would abort both processes ("op.preamble.length <= op.nbytes").
        self.check_disagreement("shape", shared_memory=False, rank1_has="[65] Float step 5")
        self.check_disagreement("shape", shared_memory=True, rank1_has="65 Float step 5")

    def test_a_stopped_rank_is_named_by_the_one_that_waited(self):
        for shared_memory, says in (
                (False, r"all_reduce\(sum\) \[collective #6, step 5\] failed: it did not complete within 3 s\. "
                        r"Rank 1 did not arrive \(or stopped inside it\)"),
                (True, r"all_reduce over shared memory timed out: rank 1 did not start the same all_reduce within "
                       r"3 s\. .*\(in all_reduce\(sum\) \[collective #6, step 5\]\)")):
            code, err, summary = self.diverge("stop", shared_memory)
            self.assertEqual(code, 1, err)
            self.assertRegex(err, r"\[rank 0\] error: rank 0: " + says)
            self.assertRegex(summary, r"^dptrain launch: exit 1: rank 0 exited with code 1: error: rank 0: " + says)

    def test_a_killed_rank_is_named_at_once(self):
        for shared_memory in (False, True):
            code, err, summary = self.diverge("kill", shared_memory)
            self.assertEqual(code, 128 + 9, err)
            self.assertEqual(summary, "dptrain launch: exit 137: rank 1 was killed by signal 9 (Killed)")


if __name__ == "__main__":
    unittest.main()

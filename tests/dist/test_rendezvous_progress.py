"""A rank that waits at the rendezvous says, within seconds, which ranks are missing and where,
keeps saying it at growing intervals, and gives up on the rendezvous timeout (not the collective
timeout's half hour) with the usual error; nothing it started outlives it."""

import os
import threading
import time
import unittest

from proc import Started, dptrain, env_with, free_port, wait_dead


def processes_in_session(session):
    """PIDs of the live processes whose session is `session` (Started puts each test's tree in its own)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[3]) == session:  # state, ppid, pgrp, session
            pids.append(int(entry))
    return pids


class WaitingRank(unittest.TestCase):
    def run_alone(self, args, timeout_s):
        """Runs `args` (one side of a two-rank job); returns (exit code, [(seconds, stderr line)], seconds)."""
        t0 = time.monotonic()
        started = Started(args, env=env_with(RANK=None, WORLD_SIZE=None, DPTRAIN_RENDEZVOUS_TIMEOUT=None))
        lines = []

        def read():
            for line in started.proc.stderr:
                lines.append((time.monotonic() - t0, line.rstrip("\n")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = started.proc.wait(timeout=timeout_s + 45)
            elapsed = time.monotonic() - t0
            reader.join(timeout=10)
            self.assertTrue(wait_dead(processes_in_session(started.proc.pid), 10),
                            "processes of the job outlived it")
        finally:
            started.close()
        return code, lines, elapsed

    def assert_progress_then_timeout(self, code, lines, elapsed, waiting, joined, port):
        text = "\n".join(line for _, line in lines)
        # Under the launcher a line can show twice: as the worker prints it and among the failed
        # worker's last lines; count each line once.
        seen, progress = set(), []
        for t, line in lines:
            line = line.strip().removeprefix("[rank 0] ")
            if f"waiting for rank(s) {waiting}" in line and line not in seen:
                seen.add(line)
                progress.append((t, line))
        self.assertTrue(progress, text)
        first_at, first = progress[0]
        self.assertLess(first_at, 10, f"first progress line came after {first_at:.1f} s")
        self.assertIn(f"rank 0: rendezvous at 127.0.0.1:{port}: 1 of 2 ranks joined ({joined}); ", first)
        self.assertRegex(first, r"; waited \d+ s, giving up in \d+ s$")
        # Growing intervals: a 15 s wait with reports at 2, 4, 8 s after each other is 3 or 4 lines.
        self.assertGreaterEqual(len(progress), 2, text)
        self.assertLessEqual(len(progress), 5, text)
        self.assertNotEqual(code, 0)
        self.assertIn(f"rank 0: rendezvous timed out after 15 s: 1 of 2 ranks joined; missing rank(s) {waiting}. "
                      f"Check that every rank was started, with the same master address and port "
                      f"(here 127.0.0.1:{port})", text)
        self.assertLess(elapsed, 15 + 30, "gave up long after its rendezvous timeout")

    def test_train_started_alone_names_the_missing_rank_and_gives_up_after_its_rendezvous_timeout(self):
        port = free_port()
        code, lines, elapsed = self.run_alone(
            [dptrain(), "train", "--dummy", "-a", "resnet20", "--world-size", "2", "--rank", "0",
             "--dist-url", f"tcp://127.0.0.1:{port}", "--rendezvous-timeout", "15"], 15)
        self.assert_progress_then_timeout(code, lines, elapsed, "1", "0", port)

    def test_launched_node_names_the_missing_node_and_its_worker_ends(self):
        port = free_port()
        code, lines, elapsed = self.run_alone(
            [dptrain(), "launch", "--nnodes", "2", "--node-rank", "0", "--nproc-per-node", "1",
             "--master-addr", "127.0.0.1", "--master-port", str(port), "--rendezvous-timeout", "15", "--",
             dptrain(), "check"], 15)
        self.assert_progress_then_timeout(code, lines, elapsed, "1 (node 1)", "0 (node 0)", port)

    def test_a_rank_whose_master_never_comes_says_so_while_it_waits(self):
        port = free_port()
        code, lines, _ = self.run_alone(
            [dptrain(), "check", "--world-size", "2", "--rank", "1", "--master-addr", "127.0.0.1",
             "--master-port", str(port), "--rendezvous-timeout", "5"], 5)
        text = "\n".join(line for _, line in lines)
        self.assertIn(f"rank 1: waiting for the master (rank 0) at 127.0.0.1:{port}: nothing accepts connections "
                      "there yet; waited ", text)
        self.assertNotEqual(code, 0)
        self.assertIn(f"rank 1: could not reach the master (rank 0) at 127.0.0.1:{port} within 5 s", text)


if __name__ == "__main__":
    unittest.main()

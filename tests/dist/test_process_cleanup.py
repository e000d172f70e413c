"""The helpers every multi-process test starts its processes with (proc.py): a test told to stop
ends what it started, even though each process runs in a session of its own."""

import os
import signal
import sys
import time
import unittest

from proc import PYTHON, Started, descendants, kill_all, pid_alive, wait_dead

# A stand-in for a test: two processes started through proc.Started (one of them with two
# children of its own), their pids printed, then a long wait for the signal.
STAND_IN = """
import sys, time
sys.path.insert(0, sys.argv[1])
import proc
alone = proc.Started(["sleep", "300"])
with_children = proc.Started(["sh", "-c", "sleep 300 & sleep 300 & wait"])
print(alone.proc.pid, with_children.proc.pid, flush=True)
time.sleep(300)
"""
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StoppedTest(unittest.TestCase):
    def started_stand_in(self):
        """The stand-in, once its processes (the two it started and the shell's two) are up."""
        stand_in = Started([PYTHON, "-c", STAND_IN, TESTS])
        self.addCleanup(stand_in.close)
        self.assertTrue(stand_in.proc.stdout.readline().split(), "the stand-in printed no pids")
        deadline = time.monotonic() + 30
        while len(descendants(stand_in.proc.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        below = descendants(stand_in.proc.pid)
        self.assertEqual(len(below), 4, below)
        self.addCleanup(kill_all, below)
        return stand_in, below

    def test_a_test_told_to_stop_ends_every_process_it_started(self):
        for signum in (signal.SIGTERM, signal.SIGHUP):
            stand_in, below = self.started_stand_in()
            stand_in.proc.send_signal(signum)
            self.assertEqual(stand_in.wait(30)[0], -signum)
            self.assertTrue(wait_dead(below, 10), [pid for pid in below if pid_alive(pid)])

    def test_a_killed_test_leaves_them_which_is_why_stop_signals_are_taken(self):
        # The negative control: SIGKILL cannot be taken, and the four outlive the stand-in.
        stand_in, below = self.started_stand_in()
        stand_in.proc.send_signal(signal.SIGKILL)
        self.assertEqual(stand_in.wait(30)[0], -signal.SIGKILL)
        time.sleep(0.5)
        self.assertEqual([pid for pid in below if pid_alive(pid)], below)


if __name__ == "__main__":
    sys.exit(unittest.main())

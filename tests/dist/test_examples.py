"""The DDP, DataParallel and spawn examples run as their documentation says, with 2 processes (under
`dptrain launch`, or started by the example itself) or 2 replicas in one process, and learn.
test_examples_styles.py has the others (one file each, so each stays within ctest's time bound)."""

import unittest

from example_runs import epochs_in, example
from proc import dptrain, env_with, run


class DdpMinimal(unittest.TestCase):
    def test_trains_on_two_processes_and_counts_validation_exactly(self):
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--",
                              example("ddp_minimal"), "--epochs", "2", "--train-size", "2560", "--val-size", "333",
                              "--timeout", "120"], timeout=280)
        self.assertEqual(code, 0, out + err)
        self.assertIn("[rank 0] ddp_minimal: 2 process(es), batch 64 per process (128 global)", out)
        epochs = epochs_in(out, "[rank 0] ")
        self.assertEqual([e[2] for e in epochs], [333, 333], out)  # every sample once, none padded
        # It learns (the run is deterministic: these were 1.15 -> 0.39 and 68% when written).
        self.assertLess(epochs[1][0], 0.7 * epochs[0][0])
        self.assertGreater(epochs[1][1], 30.0)
        self.assertNotIn("[rank 1] epoch", out)  # only rank 0 reports


class DataParallel(unittest.TestCase):
    def test_one_process_trains_two_replicas(self):
        code, out, err = run([example("data_parallel"), "--replicas", "2", "--epochs", "2", "--train-size", "2560",
                              "--val-size", "333"], timeout=280)
        self.assertEqual(code, 0, out + err)
        self.assertIn("data_parallel: 2 replica(s) on cpu, batch 128 per step (about 64 per replica)", out)
        epochs = epochs_in(out)
        self.assertEqual([e[2] for e in epochs], [333, 333], out)
        # It learns (deterministic for a given intra-op thread count: 1.19 -> 0.42 and 47% when written).
        self.assertLess(epochs[1][0], 0.7 * epochs[0][0])
        self.assertGreater(epochs[1][1], 30.0)


class Spawn(unittest.TestCase):
    def test_starts_two_workers_itself_and_counts_validation_exactly(self):
        # A GPU subset in the environment must not disturb the CPU path (nprocs given).
        code, out, err = run([example("spawn"), "--nprocs", "2", "--epochs", "2", "--train-size", "2560",
                              "--val-size", "333", "--timeout", "120"],
                             timeout=280, env=env_with(CUDA_VISIBLE_DEVICES="1,3"))
        self.assertEqual(code, 0, out + err)
        self.assertIn("[rank 0] spawn: 2 process(es), batch 64 per process (128 global)", out)
        epochs = epochs_in(out, "[rank 0] ")
        self.assertEqual([e[2] for e in epochs], [333, 333], out)
        # The same training as ddp_minimal (1.15 -> 0.39 and 68% when written).
        self.assertLess(epochs[1][0], 0.7 * epochs[0][0])
        self.assertGreater(epochs[1][1], 30.0)
        self.assertNotIn("[rank 1] epoch", out)


if __name__ == "__main__":
    unittest.main()

"""Gradient accumulation: 2 ranks with --accum-steps 2 and batch B per micro-batch take the same
optimizer steps as 1 process with batch 4B (the same samples per step, the same augmentation),
with and without gradient clipping on the accumulated, averaged gradients. The model has no batch
norm (ViT-Ti/16), whose statistics would differ between micro-batches and the whole batch.

The tolerance must separate the right answer from the likely wrong one: micro-batch losses summed
instead of averaged double the gradient. Clipping can hide that factor (a clipped gradient has the
same norm either way), so the unclipped run without weight decay carries the negative control:
there a doubled gradient is exactly a doubled learning rate, and that run must land far outside."""

import os
import tempfile
import unittest

from proc import dptrain, run
from train_runs import alone, compare_checkpoints

B = 4
TOLERANCE = 1e-5
COMMON = ["--dummy", "-a", "vit_ti_16", "--image-size", "32", "--dummy-train-size", "64", "--dummy-val-size", "16",
          "-j", "1", "--seed", "2", "--no-lr-scaling", "--max-steps", "3", "-p", "100"]
CLIPPED = ["--lr", "0.05", "--clip-grad-norm", "0.5"]
UNCLIPPED = ["--wd", "0"]


class Accumulation(unittest.TestCase):
    def train(self, output, *args, ranks):
        if ranks == 1:
            code, out, err = run([dptrain(), "train", *COMMON, *args, "--output", output], timeout=240, env=alone())
        else:
            code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", str(ranks), "--", dptrain(),
                                  "train", *COMMON, *args, "--output", output], timeout=240)
        self.assertEqual(code, 0, out + err)
        return out

    def max_abs_diff(self, a, b):
        comparison = compare_checkpoints(os.path.join(a, "checkpoint.pt"), os.path.join(b, "checkpoint.pt"))
        print(comparison)
        self.assertEqual(comparison.positions, "3 0 3 3 0 3")  # global step, epoch, step in epoch
        return comparison.max_abs_diff

    def test_two_ranks_accumulating_two_micro_batches_equal_one_process_with_four_times_the_batch(self):
        with tempfile.TemporaryDirectory(prefix="dpt_accum_") as tmp:
            out = lambda name: os.path.join(tmp, name)
            log = self.train(out("ranks"), *CLIPPED, "-b", str(B), "--accum-steps", "2", ranks=2)
            self.assertIn(f"batch {B} per process x 2 accumulation steps ({4 * B} global)", log)
            self.train(out("single"), *CLIPPED, "-b", str(4 * B), ranks=1)
            # Sums over other partitions of the batch round apart: float32 rounding, not a sample's weight.
            self.assertLess(self.max_abs_diff(out("ranks"), out("single")), TOLERANCE)

            self.train(out("ranks_unclipped"), *UNCLIPPED, "--lr", "0.05", "-b", str(B), "--accum-steps", "2", ranks=2)
            self.train(out("single_unclipped"), *UNCLIPPED, "--lr", "0.05", "-b", str(4 * B), ranks=1)
            self.assertLess(self.max_abs_diff(out("ranks_unclipped"), out("single_unclipped")), TOLERANCE)
            # What summed micro-batch losses would have trained: twice the gradient, here twice the rate.
            self.train(out("summed"), *UNCLIPPED, "--lr", "0.1", "-b", str(4 * B), ranks=1)
            self.assertGreater(self.max_abs_diff(out("ranks_unclipped"), out("summed")), 100 * TOLERANCE)


if __name__ == "__main__":
    unittest.main()

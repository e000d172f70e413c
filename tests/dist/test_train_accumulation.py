"""Gradient accumulation: 2 ranks with --accum-steps 2 and batch B per micro-batch take the same
optimizer steps as 1 process with batch 4B (the same samples per step, the same augmentation),
with gradient clipping on the accumulated, averaged gradients. The model has no batch norm
(ViT-Ti/16), whose statistics would differ between micro-batches and the whole batch."""

import os
import tempfile
import unittest

from proc import PYTHON, dptrain, run
from train_runs import COMPARE, alone

B = 4
COMMON = ["--dummy", "-a", "vit_ti_16", "--image-size", "32", "--dummy-train-size", "64", "--dummy-val-size", "16",
          "-j", "1", "--seed", "2", "--lr", "0.05", "--no-lr-scaling", "--clip-grad-norm", "0.5", "--max-steps", "3",
          "-p", "100"]


class Accumulation(unittest.TestCase):
    def test_two_ranks_accumulating_two_micro_batches_equal_one_process_with_four_times_the_batch(self):
        with tempfile.TemporaryDirectory(prefix="dpt_accum_") as tmp:
            ranks, single = os.path.join(tmp, "ranks"), os.path.join(tmp, "single")
            code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                                  *COMMON, "-b", str(B), "--accum-steps", "2", "--output", ranks], timeout=240)
            self.assertEqual(code, 0, out + err)
            self.assertIn(f"batch {B} per process x 2 accumulation steps ({4 * B} global)", out)
            code, out, err = run([dptrain(), "train", *COMMON, "-b", str(4 * B), "--output", single], timeout=240,
                                 env=alone())
            self.assertEqual(code, 0, out + err)
            code, out, err = run([PYTHON, "-c", COMPARE, os.path.join(ranks, "checkpoint.pt"),
                                  os.path.join(single, "checkpoint.pt")], timeout=120)
            self.assertEqual(code, 0, err)
            lines = out.split()
            print(out.strip())
            self.assertEqual(out.splitlines()[0], "3 0 3 3 0 3")  # global step, epoch, step in epoch
            # Sums over other partitions of the batch round apart: float32 rounding, not a sample's weight.
            self.assertLess(float(lines[lines.index("max_abs_diff") + 1]), 1e-5)


if __name__ == "__main__":
    unittest.main()

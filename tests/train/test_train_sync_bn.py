"""`dptrain train --sync-bn`: 2 processes x batch B end with the same weights and BatchNorm running
statistics as 1 process x batch 2B (the samples and crops of a step are the same, and SyncBatchNorm
normalises over the joined batch); plain BatchNorm on 2 processes does not."""

import os
import tempfile
import unittest

from proc import PYTHON, dptrain, run
from train_runs import alone

# ResNet-20 (19 BatchNorm layers) on 32 px synthetic images: 320 training images, 10 steps of a
# global batch of 32 in either layout. The learning rate is small on purpose: at lr 0.1 this
# network's first steps amplify rounding about 30-fold per step (one process with and without
# --channels-last, a rounding-level change, ends 2.8 apart after 10 steps), which would hide what
# the test is about; at 1e-4 the float32 gap stays near 1e-5.
COMMON = ["--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-train-size", "320", "--dummy-val-size", "33",
          "-j", "1", "--lr", "0.0001", "--no-lr-scaling", "--seed", "5", "--deterministic", "--epochs", "1",
          "--max-steps", "10", "-p", "100"]

MAX_DIFF = r"""
import sys, torch
a, b = torch.load(sys.argv[1])["state_dict"], torch.load(sys.argv[2])["state_dict"]
assert list(a) == list(b)
print(max((x.double() - b[k].double()).abs().max().item() for k, x in a.items() if x.is_floating_point()))
"""


class SyncBatchNorm(unittest.TestCase):
    def train(self, output, processes, batch, *extra):
        args = [dptrain(), "train", *COMMON, "-b", str(batch), "--output", output, *extra]
        if processes > 1:
            args = [dptrain(), "launch", "--standalone", "--nproc-per-node", str(processes), "--", *args]
        code, out, err = run(args, timeout=240, env=alone())
        self.assertEqual(code, 0, out + err)
        self.assertIn('"global_step":10', out)
        return os.path.join(output, "checkpoint.pt")

    def max_diff(self, a, b):
        code, out, err = run([PYTHON, "-c", MAX_DIFF, a, b], timeout=120)
        self.assertEqual(code, 0, err)
        return float(out)

    def test_two_processes_with_sync_bn_equal_one_process_with_twice_the_batch(self):
        with tempfile.TemporaryDirectory(prefix="dpt_syncbn_") as tmp:
            joined = self.train(os.path.join(tmp, "one"), 1, 32)
            synced = self.train(os.path.join(tmp, "sync"), 2, 16, "--sync-bn")
            plain = self.train(os.path.join(tmp, "plain"), 2, 16)
            synced_diff, plain_diff = self.max_diff(joined, synced), self.max_diff(joined, plain)
            print(f"max |delta| vs 1 x 32: --sync-bn {synced_diff:.3g}, plain BatchNorm {plain_diff:.3g}")
            self.assertLessEqual(synced_diff, 1e-4)
            self.assertGreater(plain_diff, 100 * synced_diff)  # the per-rank statistics really differ


if __name__ == "__main__":
    unittest.main()

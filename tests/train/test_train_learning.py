"""`dptrain train` learns: on 2 processes it reaches at least 90% validation top-1 on the synthetic
set, and at least 95% on the UCI digits written as an ImageFolder (a real data set), with the
accuracy counted exactly over both ranks. (The model zoo's: test_train_zoo_learning.py.)"""

import os
import tempfile
import unittest

from proc import PYTHON, run
from train_runs import train_two_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Learning(unittest.TestCase):
    def test_synthetic_set_reaches_90_percent(self):
        out, summary = train_two_ranks("--dummy", "--image-size", "24", "--dummy-train-size", "2000",
                                       "--dummy-val-size", "501", "-b", "32", "--lr", "0.4", "--epochs", "2",
                                       "--lr-schedule", "cosine", "--wd", "5e-4")
        print(out)
        self.assertIn("2 process(es), batch 32 per process (64 global), lr 0.1 (0.4 x 64/256)", out)
        self.assertEqual(summary["val"]["count"], 501)
        self.assertGreaterEqual(summary["val"]["acc1"], 90.0)

    def test_digits_reach_95_percent(self):
        with tempfile.TemporaryDirectory(prefix="dpt_digits_") as tmp:
            code, out, err = run([PYTHON, os.path.join(ROOT, "scripts", "make-digits-imagefolder"), tmp], timeout=120)
            self.assertEqual(code, 0, err)
            # Mirrored digits are other shapes: no flips here.
            out, summary = train_two_ranks(tmp, "--image-size", "24", "-b", "16", "--lr", "0.8", "--epochs", "5",
                                           "--lr-schedule", "cosine", "--wd", "5e-4", "--no-flip")
            print(out)
            self.assertIn("data: ImageFolder, 1437 training and 360 validation images, 10 classes", out)
            self.assertEqual(summary["val"]["count"], 360)
            self.assertGreaterEqual(summary["val"]["acc1"], 95.0)


if __name__ == "__main__":
    unittest.main()

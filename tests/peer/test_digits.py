"""A real data set no one here made: scikit-learn's UCI handwritten digits, written as an
ImageFolder by scripts/make-digits-imagefolder, read by torchvision and by dptrain (one epoch of
ddp_minimal on 2 processes) with the same classes and counts."""

import os
import subprocess
import tempfile
import unittest

from proc import PYTHON, dptrain, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Digits(unittest.TestCase):
    def test_digits_imagefolder_trains_end_to_end(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, out, err = run([PYTHON, os.path.join(ROOT, "scripts", "make-digits-imagefolder"), tmp], timeout=120)
            self.assertEqual(code, 0, err)
            self.assertIn("wrote 1437 training and 360 validation images", out)
            listing = subprocess.run([PYTHON, "-c", (
                "import sys, torchvision\n"
                "for split in ('train', 'val'):\n"
                "    d = torchvision.datasets.ImageFolder(sys.argv[1] + '/' + split)\n"
                "    print(split, len(d), d.classes)\n"), tmp], capture_output=True, text=True, timeout=120)
            classes = str([str(c) for c in range(10)])
            self.assertEqual(listing.stdout.splitlines(), [f"train 1437 {classes}", f"val 360 {classes}"])

            code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--",
                                  os.path.join(os.path.dirname(dptrain()), "ddp_minimal"), "--data", tmp,
                                  "--epochs", "1", "--timeout", "120"], timeout=280)
            self.assertEqual(code, 0, out + err)
            self.assertIn("1437 training images", out)
            self.assertRegex(out, r"epoch 1/1: train loss [\d.]+, val loss [\d.]+, val top-1 [\d.]+% \(360 images\)")


if __name__ == "__main__":
    unittest.main()

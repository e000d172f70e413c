"""`dptrain train` learns: on 2 processes it reaches at least 90% validation top-1 on the synthetic
set, and at least 95% on the UCI digits written as an ImageFolder (a real data set), with the
accuracy counted exactly over both ranks; the model zoo's MobileNetV2 and a ViT learn the synthetic
set too."""

import os
import tempfile
import unittest

from proc import PYTHON, dptrain, run
from train_runs import last_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def train_two_ranks(*args, arch="resnet20"):
    code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                          "-a", arch, "-j", "1", "-p", "1000", *args], timeout=280)
    if code != 0:
        raise AssertionError(out + err)
    return out, last_json(out)


# arch -> (image size, training images, learning rate, epochs, top-1 bar); measured here: 98.2%
# and 90.0%. MobileNetV2 at lr 0.2 reached 96-99% over seeds here but 84% on another CPU: at 0.1
# seeds 0-7 give 96.4-99.6%. EfficientNet-B0 is not here: its batch norms' momentum of 0.01 leaves
# the running statistics far behind for the first epochs, and at 64 px it took 4 epochs (200 s of
# two cores, the longest run of the suite) to 80-85% on LibTorch 1.13 and 73% on 2.6;
# peer.test_models_oracle holds its forward and gradients to torchvision's.
ZOO = {"mobilenet_v2": ("32", "2000", "0.1", "4", 90.0),
       "vit_ti_16": ("32", "1000", "0.05", "2", 80.0)}


class Learning(unittest.TestCase):
    def test_synthetic_set_reaches_90_percent(self):
        out, summary = train_two_ranks("--dummy", "--image-size", "24", "--dummy-train-size", "2000",
                                       "--dummy-val-size", "501", "-b", "32", "--lr", "0.4", "--epochs", "2",
                                       "--lr-schedule", "cosine", "--wd", "5e-4")
        print(out)
        self.assertIn("2 process(es), batch 32 per process (64 global), lr 0.1 (0.4 x 64/256)", out)
        self.assertEqual(summary["val"]["count"], 501)
        self.assertGreaterEqual(summary["val"]["acc1"], 90.0)

    def test_model_zoo_learns_the_synthetic_set(self):
        for arch, (size, images, lr, epochs, bar) in ZOO.items():
            with self.subTest(arch=arch):
                out, summary = train_two_ranks("--dummy", "--image-size", size, "--dummy-train-size", images,
                                               "--dummy-val-size", "501", "-b", "32", "--lr", lr, "--epochs", epochs,
                                               "--lr-schedule", "cosine", "--wd", "5e-5", arch=arch)
                print(out)
                self.assertEqual(summary["val"]["count"], 501)
                self.assertGreaterEqual(summary["val"]["acc1"], bar)

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

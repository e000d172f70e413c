"""The model zoo's MobileNetV2 and a ViT learn the synthetic set under `dptrain train` on 2
processes, to the bars below."""

import unittest

from train_runs import train_two_ranks

# arch -> (image size, training images, learning rate, epochs, top-1 bar); measured here: 98.2%
# and 90.0%. MobileNetV2 at lr 0.2 reached 96-99% over seeds here but 84% on another CPU: at 0.1
# seeds 0-7 give 96.4-99.6%. EfficientNet-B0 is not here: its batch norms' momentum of 0.01 leaves
# the running statistics far behind for the first epochs, and at 64 px it took 4 epochs (200 s of
# two cores, the longest run of the suite) to 80-85% on LibTorch 1.13 and 73% on 2.6;
# peer.test_models_oracle holds its forward and gradients to torchvision's.
ZOO = {"mobilenet_v2": ("32", "2000", "0.1", "4", 90.0),
       "vit_ti_16": ("32", "1000", "0.05", "2", 80.0)}


class ZooLearning(unittest.TestCase):
    def test_model_zoo_learns_the_synthetic_set(self):
        for arch, (size, images, lr, epochs, bar) in ZOO.items():
            with self.subTest(arch=arch):
                out, summary = train_two_ranks("--dummy", "--image-size", size, "--dummy-train-size", images,
                                               "--dummy-val-size", "501", "-b", "32", "--lr", lr, "--epochs", epochs,
                                               "--lr-schedule", "cosine", "--wd", "5e-5", arch=arch)
                print(out)
                self.assertEqual(summary["val"]["count"], 501)
                self.assertGreaterEqual(summary["val"]["acc1"], bar)


if __name__ == "__main__":
    unittest.main()

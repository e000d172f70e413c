"""Checkpoints of real `dptrain train` runs, one architecture per family of the zoo: after a
training step (weights, batch-norm statistics and their counters all moved), checkpoint.pt loads
with torch.load into torchvision's model (the GhostNet authors' layout for GhostNet) with no
missing or extra entries, and gives the logits dptrain's model gives with those weights.
(test_train_interop does the same for resnet18, with the optimizer state.)"""

import os
import tempfile
import unittest

import torch

from proc import dptrain, run
from torchvision_zoo import NUM_CLASSES, torchvision_model
from train_runs import alone

ORACLE = os.path.join(os.path.dirname(dptrain()), "dptrain_models_oracle")

# One architecture per family (ResNet is test_train_interop's) -> the input side it trains at:
# the smallest each accepts, 299 for Inception v3's auxiliary head.
FAMILIES = {
    "alexnet": 64, "vgg11_bn": 32, "squeezenet1_1": 64, "mobilenet_v2": 32, "mobilenet_v3_small": 32,
    "efficientnet_b0": 32, "shufflenet_v2_x0_5": 32, "densenet121": 32, "regnet_y_400mf": 32, "convnext_tiny": 32,
    "vit_ti_16": 32, "googlenet": 32, "inception_v3": 299, "ghostnet": 32,
}


def relative_error(actual, expected):
    return ((actual - expected).abs().max() / expected.abs().max().clamp(min=1e-12)).item()


class CheckpointFamilies(unittest.TestCase):
    def test_each_familys_checkpoint_gives_torchvision_dptrains_logits(self):
        for arch, side in FAMILIES.items():
            with self.subTest(arch=arch), tempfile.TemporaryDirectory(prefix="dpt_families_") as tmp:
                # Plain SGD keeps the checkpoint small (no momentum buffers): VGG's is half a GB.
                code, out, err = run([dptrain(), "train", "--dummy", "-a", arch, "--image-size", str(side),
                                      "--dummy-train-size", "4", "--dummy-val-size", "2", "-b", "4", "-j", "1",
                                      "--momentum", "0", "--max-steps", "1", "--output", tmp], timeout=240, env=alone())
                self.assertEqual(code, 0, out + err)
                checkpoint = torch.load(os.path.join(tmp, "checkpoint.pt"))
                self.assertEqual((checkpoint["arch"], checkpoint["global_step"]), (arch, 1))
                state = checkpoint["state_dict"]
                model = torchvision_model(arch, side)
                self.assertEqual(list(state.keys()), list(model.state_dict().keys()))
                model.load_state_dict(state, strict=True)
                trained = [key for key, value in state.items() if key.endswith("num_batches_tracked") and value == 1]
                self.assertEqual(bool(trained), any(key.endswith("running_mean") for key in state), "a step was taken")
                model.eval()
                torch.manual_seed(0)
                inputs = torch.randn(2, 3, side, side)
                with torch.no_grad():
                    logits = model(inputs)
                torch.save(dict(state), os.path.join(tmp, "state.pt"))
                torch.save({"input": inputs, "logits": logits}, os.path.join(tmp, "io.pt"))
                del checkpoint, state, model
                code, out, err = run([ORACLE, "import", arch, str(NUM_CLASSES), os.path.join(tmp, "state.pt"),
                                      os.path.join(tmp, "io.pt"), os.path.join(tmp, "dptrain.pt")], timeout=120)
                self.assertEqual(code, 0, err)
                error = relative_error(torch.load(os.path.join(tmp, "dptrain.pt"))["logits"], logits)
                print(f"{arch}: relative logit difference {error:.2e}")
                self.assertLessEqual(error, 1e-4)


if __name__ == "__main__":
    unittest.main()

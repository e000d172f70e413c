"""dptrain checkpoints and Python: a checkpoint of a resnet18 run loads with torch.load into
torchvision's resnet18 and gives dptrain's logits on the same input; its optimizer state loads into
torch.optim.SGD; a Python-saved dict(state_dict) evaluates through `dptrain eval` (and `train
--pretrained -e`) to the counts and loss Python computes with torchvision's transforms, each
model's own (filter and normalisation) unless --interpolation says otherwise."""

import json
import os
import tempfile
import unittest

from proc import PYTHON, dptrain, run
from train_runs import alone, last_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORACLE = os.path.join(os.path.dirname(dptrain()), "dptrain_models_oracle")

TO_TORCHVISION = r"""
import sys, torch, torchvision
ck = torch.load(sys.argv[1])
assert ck["arch"] == "resnet18" and ck["epoch"] == 0 and ck["global_step"] == 2, (ck["arch"], ck["epoch"])
model = torchvision.models.resnet18(num_classes=10)
model.load_state_dict(ck["state_dict"])
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
opt.load_state_dict(ck["optimizer"])
g = opt.param_groups[0]
print("optimizer", len(opt.state), g["momentum"], g["weight_decay"], g["nesterov"])
model.eval()
torch.manual_seed(0)
x = torch.randn(3, 3, 32, 32)
with torch.no_grad():
    logits = model(x)
torch.save(dict(ck["state_dict"]), sys.argv[2] + "/state.pt")
torch.save({"input": x, "logits": logits}, sys.argv[2] + "/io.pt")
"""

MAX_DIFF = r"""
import sys, torch
a = torch.load(sys.argv[1])["logits"]; b = torch.load(sys.argv[2])["logits"]
print("max_abs_logit_diff", (a - b).abs().max().item())
"""

# argv: data folder, weights file to write, arch, resize, interpolation, mean and std (one value
# each, or "imagenet").
PYTHON_EVAL = r"""
import json, sys, torch, torchvision
import onednn_guard  # without oneDNN where dptrain runs without it
from torchvision import transforms as T
data, weights, arch, resize, interpolation, stats = sys.argv[1:]
torch.manual_seed(5)
model = getattr(torchvision.models, arch)(num_classes=10)
mean, std = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) if stats == "imagenet" else ([float(stats)] * 3,) * 2
tf = T.Compose([T.Resize(int(resize), getattr(T.InterpolationMode, interpolation)), T.CenterCrop(32), T.ToTensor(),
                T.Normalize(mean, std)])
ds = torchvision.datasets.ImageFolder(data + "/val", tf)
loader = torch.utils.data.DataLoader(ds, batch_size=64)
# Batch-norm statistics of the first batch: freshly initialised deep networks (EfficientNet's) give
# near-equal logits otherwise, and near-ties make top-1 counts a matter of rounding.
for module in model.modules():
    if isinstance(module, torch.nn.BatchNorm2d):
        module.momentum = 1.0
with torch.no_grad():
    model(next(iter(loader))[0])
torch.save(dict(model.state_dict()), weights)
model.eval()
loss_sum, correct1, correct5, count = 0.0, 0, 0, 0
with torch.no_grad():
    for x, y in loader:
        out = model(x)
        loss_sum += torch.nn.functional.cross_entropy(out, y).item() * len(y)
        top5 = out.topk(5, 1).indices
        correct1 += (top5[:, 0] == y).sum().item()
        correct5 += (top5 == y[:, None]).any(1).sum().item()
        count += len(y)
print(json.dumps({"loss_sum": loss_sum, "correct1": correct1, "correct5": correct5, "count": count}))
"""


SAME_BODY = r"""
import sys, torch
given, trained = torch.load(sys.argv[1]), torch.load(sys.argv[2])["state_dict"]
names = [k for k in trained if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))]
# One step of lr 1e-30 moves a weight of 0 (BatchNorm's biases) by about 1e-30, and no other.
same = sum(1 for k in names if not k.startswith("fc.") and torch.allclose(given[k], trained[k], rtol=0, atol=1e-20))
print(len(names), "parameters:", same, "equal,", "fc", list(trained["fc.weight"].shape))
"""


def keep_first_validation_images(data, per_class):
    """Leaves the first `per_class` images of each class in `data`/val: two batches of 64 show the
    batching, and EfficientNet-V2-L's forward over all 360 took most of this test's minute."""
    val = os.path.join(data, "val")
    for label in os.listdir(val):
        for name in sorted(os.listdir(os.path.join(val, label)))[per_class:]:
            os.remove(os.path.join(val, label, name))


class Interop(unittest.TestCase):
    def test_checkpoint_loads_into_torchvision_with_the_same_logits(self):
        with tempfile.TemporaryDirectory(prefix="dpt_interop_") as tmp:
            code, out, err = run([dptrain(), "train", "--dummy", "-a", "resnet18", "--image-size", "32",
                                  "--dummy-train-size", "32", "--dummy-val-size", "8", "-b", "8", "-j", "1",
                                  "--max-steps", "2", "--output", tmp], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            code, out, err = run([PYTHON, "-c", TO_TORCHVISION, os.path.join(tmp, "checkpoint.pt"), tmp], timeout=120)
            self.assertEqual(code, 0, err)
            self.assertEqual(out.strip(), "optimizer 62 0.9 0.0001 False")
            code, out, err = run([ORACLE, "import", "resnet18", "10", os.path.join(tmp, "state.pt"),
                                  os.path.join(tmp, "io.pt"), os.path.join(tmp, "dptrain.pt")], timeout=120)
            self.assertEqual(code, 0, err)
            code, out, err = run([PYTHON, "-c", MAX_DIFF, os.path.join(tmp, "io.pt"), os.path.join(tmp, "dptrain.pt")],
                                 timeout=120)
            self.assertEqual(code, 0, err)
            print(out.strip())
            self.assertLess(float(out.split()[1]), 1e-4)

    def test_torchvisions_imagenet_weights_fine_tune_on_other_classes(self):
        """torchvision's 1000-class resnet18 weights as --pretrained for 10 classes: fc starts fresh,
        every other parameter is the file's (a learning rate of 1e-30 leaves them as they were, to 1e-20)."""
        with tempfile.TemporaryDirectory(prefix="dpt_finetune_") as tmp:
            weights = os.path.join(tmp, "imagenet.pt")
            code, out, err = run([PYTHON, "-c", "import sys, torch, torchvision; torch.manual_seed(0); "
                                  "torch.save(dict(torchvision.models.resnet18().state_dict()), sys.argv[1])", weights],
                                 timeout=120)
            self.assertEqual(code, 0, err)
            code, out, err = run([dptrain(), "train", "--dummy", "-a", "resnet18", "--image-size", "32",
                                  "--dummy-train-size", "16", "--dummy-val-size", "8", "-b", "8", "-j", "1",
                                  "--max-steps", "1", "--lr", "1e-30", "--wd", "0", "--pretrained", weights,
                                  "--output", tmp], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            self.assertIn(f"the weights in {weights} were made for 1000 classes and this data has 10: fc.weight, "
                          "fc.bias start fresh (fine-tuning); their other 120 entries are loaded", out)
            code, out, err = run([PYTHON, "-c", SAME_BODY, weights, os.path.join(tmp, "checkpoint.pt")], timeout=120)
            self.assertEqual(code, 0, err)
            self.assertEqual(out.split(), ["62", "parameters:", "60", "equal,", "fc", "[10,", "512]"])

    def test_python_state_dict_evaluates_like_python(self):
        """With the model's evaluation transform at 32 px: resize 37 (256 / 224), bilinear for
        resnet18, bicubic for efficientnet_b0 or when asked, 0.5 mean and std for
        efficientnet_v2_l (its resize is its crop); --val-resize-size overrides the resize (and
        --train-crop-size leaves validation alone)."""
        cases = [("resnet18", [], "37", "BILINEAR", "imagenet"), ("efficientnet_b0", [], "37", "BICUBIC", "imagenet"),
                 ("resnet18", ["--interpolation", "bicubic"], "37", "BICUBIC", "imagenet"),
                 ("resnet18", ["--val-resize-size", "44", "--train-crop-size", "24"], "44", "BILINEAR", "imagenet"),
                 ("efficientnet_v2_l", [], "32", "BICUBIC", "0.5")]
        with tempfile.TemporaryDirectory(prefix="dpt_interop_") as tmp:
            data, weights = os.path.join(tmp, "digits"), os.path.join(tmp, "python.pt")
            code, out, err = run([PYTHON, os.path.join(ROOT, "scripts", "make-digits-imagefolder"), data], timeout=120)
            self.assertEqual(code, 0, err)
            keep_first_validation_images(data, 12)
            for arch, flags, *transform in cases:
                with self.subTest(arch=arch, flags=flags):
                    code, out, err = run([PYTHON, "-c", PYTHON_EVAL, data, weights, arch, *transform], timeout=180)
                    self.assertEqual(code, 0, err)
                    expected = json.loads(out)
                    self.assertEqual(expected["count"], 120)
                    common = [data, "-a", arch, "--image-size", "32", "-b", "64", "-j", "1", *flags]
                    code, out, err = run([dptrain(), "eval", *common, "--checkpoint", weights], timeout=180,
                                         env=alone())
                    self.assertEqual(code, 0, out + err)
                    results = [last_json(out)]
                    if arch == "resnet18" and not flags:
                        code, out, err = run([dptrain(), "train", *common, "-e", "--pretrained", weights],
                                             timeout=180, env=alone())
                        self.assertEqual(code, 0, out + err)
                        results.append(last_json(out)["val"])
                    print(arch, flags, "python", expected, "dptrain", results)
                    for result in results:
                        for key in ("count", "correct1", "correct5"):
                            self.assertEqual(result[key], expected[key], key)
                        # float32 logits: EfficientNet-V2-L's reach hundreds, its loss sum a million
                        delta = 1e-4 * expected["count"] + 1e-6 * expected["loss_sum"]
                        self.assertAlmostEqual(result["loss_sum"], expected["loss_sum"], delta=delta)


if __name__ == "__main__":
    unittest.main()

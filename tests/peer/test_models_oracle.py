"""dptrain's ResNets against torchvision 0.14: same state-dict entries, and the same logits after
moving the weights either way (dptrain -> torch.load -> torchvision, torch.save -> dptrain).

Drives $DPT_BUILD/bin/dptrain_models_oracle (tests/peer/dptrain_models_oracle.cpp).
"""
import os
import subprocess
import tempfile
import unittest

import torch
import torchvision

BUILD = os.environ.get("DPT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
ORACLE = os.path.join(BUILD, "bin", "dptrain_models_oracle")
DTYPES = {torch.float32: "Float", torch.int64: "Long"}


def oracle(*args):
    if not os.path.exists(ORACLE):
        raise AssertionError(f"{ORACLE} is missing: build the target dptrain_models_oracle")
    return subprocess.run([ORACLE, *map(str, args)], capture_output=True, text=True, timeout=120)


def checked(*args):
    result = oracle(*args)
    if result.returncode != 0:
        raise AssertionError(f"dptrain_models_oracle {args} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def randomise_norms(model):
    """Norm statistics and affine terms away from their defaults, as the C++ side does."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.copy_(torch.rand_like(module.weight) + 0.5)
                module.bias.copy_((torch.rand_like(module.bias) - 0.5) * 0.2)
                module.running_mean.copy_((torch.rand_like(module.running_mean) - 0.5) * 0.2)
                module.running_var.copy_(torch.rand_like(module.running_var) + 0.5)
                module.num_batches_tracked.fill_(5)


def max_error(actual, expected):
    return (actual - expected).abs().max().item()


class StateDictEntries(unittest.TestCase):
    def test_names_shapes_dtypes_and_order_match_torchvision(self):
        # 34 and 101 come from the same code paths; their counts are checked in tests/unit.
        for arch in ["resnet18", "resnet50", "resnet152"]:
            with self.subTest(arch=arch):
                model = getattr(torchvision.models, arch)(num_classes=10)
                expected = [f"{name} {list(t.shape)} {DTYPES[t.dtype]}"
                            for name, t in model.state_dict().items()]
                expected.append(f"parameters {sum(p.numel() for p in model.parameters())}")
                lines = checked("keys", arch, 10).splitlines()
                self.assertEqual(lines, expected)


class Logits(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="dpt_models_oracle_")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_dptrain_weights_in_torchvision(self):
        checked("export", "resnet18", 10, self.dir.name)
        state = torch.load(self.path("state.pt"))
        io = torch.load(self.path("io.pt"))
        self.assertIs(type(state), dict)
        model = torchvision.models.resnet18(num_classes=10)
        self.assertEqual(list(state.keys()), list(model.state_dict().keys()))
        model.load_state_dict(state, strict=True)
        self.assertEqual(model.bn1.num_batches_tracked.item(), 7)
        model.eval()
        with torch.no_grad():
            logits = model(io["input"])
        self.assertEqual(list(io["logits"].shape), [2, 10])
        self.assertLessEqual(max_error(logits, io["logits"]), 1e-4)

    def test_torchvision_weights_in_dptrain(self):
        torch.manual_seed(3)
        model = torchvision.models.resnet18(num_classes=10)
        randomise_norms(model)
        model.eval()
        inputs = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            expected = model(inputs)
        torch.save(dict(model.state_dict()), self.path("state.pt"))
        # Two entries: LibTorch 1.13 cannot unpickle a one-entry dict from Python (opcode SETITEM).
        torch.save({"input": inputs, "logits": expected}, self.path("io.pt"))
        checked("import", "resnet18", 10, self.path("state.pt"), self.path("io.pt"), self.path("logits.pt"))
        actual = torch.load(self.path("logits.pt"))["logits"]
        self.assertLessEqual(max_error(actual, expected), 1e-4)

    def test_wrong_num_classes_names_the_entry_and_shapes(self):
        torch.save(dict(torchvision.models.resnet18().state_dict()), self.path("state.pt"))
        torch.save({"input": torch.zeros(2, 3, 32, 32), "logits": torch.zeros(2, 10)}, self.path("io.pt"))
        result = oracle("import", "resnet18", 10, self.path("state.pt"), self.path("io.pt"), self.path("out.pt"))
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr,
                         "error: state dict entry 'fc.weight' has the wrong shape: the model expects [10, 512], "
                         "the state dict has [1000, 512]; check the architecture and num_classes the state dict "
                         "was saved with\n")
        self.assertFalse(os.path.exists(self.path("out.pt")))


if __name__ == "__main__":
    unittest.main()

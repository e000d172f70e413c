"""dptrain's model zoo against torchvision in numbers: for one or more sizes of each family, weights
moved either way give the same eval-mode logits, and one training step's gradients match with
dropout and stochastic depth off (the structure of every architecture: test_models_structure).

Drives $DPT_BUILD/bin/dptrain_models_oracle (tests/peer/dptrain_models_oracle.cpp).
"""
import os
import tempfile
import unittest

import torch
import torchvision

from models_oracle import checked, oracle, uninitialised
from torchvision_zoo import NUM_CLASSES, torchvision_model

# Architecture -> (input side, relative tolerance on logits and gradients). One or more per
# family, at the smallest input each accepts, so the zoo stays within minutes.
NUMERIC = {
    "alexnet": (64, 1e-5), "vgg11_bn": (32, 1e-5), "resnet18": (64, 1e-5), "resnext50_32x4d": (64, 1e-4),
    "wide_resnet50_2": (64, 1e-4), "squeezenet1_0": (64, 1e-5), "squeezenet1_1": (64, 1e-5),
    "mobilenet_v2": (64, 1e-4), "mobilenet_v3_small": (64, 1e-4), "mobilenet_v3_large": (64, 1e-4),
    "efficientnet_b0": (64, 1e-4), "efficientnet_v2_s": (64, 1e-4), "vit_b_32": (64, 1e-4),
    "vit_ti_16": (64, 1e-4), "shufflenet_v2_x0_5": (64, 1e-4), "densenet121": (64, 1e-4),
    "regnet_x_400mf": (64, 1e-4), "regnet_y_400mf": (64, 1e-4), "convnext_tiny": (64, 1e-4),
    "googlenet": (64, 1e-4), "inception_v3": (299, 1e-4), "ghostnet": (64, 1e-4),
}


def without_randomness(model):
    """Dropout and stochastic depth off, as the C++ side builds its model."""
    for module in model.modules():
        if isinstance(module, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            module.p = 0.0
    return model


def randomise_norms(model):
    """Norm statistics and affine terms away from their defaults, ConvNeXt's layer scales up from
    1e-6, and zero-initialised linear layers (ViT's head) random, as the C++ side does: every
    parameter then shows in the logits."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and not module.weight.any():
                module.weight.normal_(0, 0.02)
            if isinstance(module, (torch.nn.BatchNorm2d, torch.nn.LayerNorm)):
                module.weight.copy_(torch.rand_like(module.weight) + 0.5)
                module.bias.copy_((torch.rand_like(module.bias) - 0.5) * 0.2)
            if isinstance(module, torchvision.models.convnext.CNBlock):
                module.layer_scale.copy_(torch.rand_like(module.layer_scale) + 0.5)
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.copy_((torch.rand_like(module.running_mean) - 0.5) * 0.2)
                module.running_var.copy_(torch.rand_like(module.running_var) + 0.5)
                module.num_batches_tracked.fill_(5)


def split_outputs(outputs):
    """The main logits and the auxiliary heads' of a training forward (GoogLeNet and Inception v3
    return namedtuples of them)."""
    if isinstance(outputs, torch.Tensor):
        return outputs, []
    return outputs[0], [aux for aux in outputs[1:] if aux is not None]


def relative_error(actual, expected):
    return ((actual - expected).abs().max() / expected.abs().max().clamp(min=1e-12)).item()


class Numerics(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory(prefix="dpt_models_oracle_")
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_torchvision_weights_give_the_same_logits_and_gradients(self):
        for arch, (side, tolerance) in NUMERIC.items():
            with self.subTest(arch=arch):
                torch.manual_seed(3)
                model = without_randomness(torchvision_model(arch, side))
                randomise_norms(model)
                inputs = torch.randn(4, 3, side, side)
                weights = torch.randn(4, NUM_CLASSES)
                model.eval()
                with torch.no_grad():
                    logits = model(inputs)
                torch.save(dict(model.state_dict()), self.path("state.pt"))
                model.train()
                train_logits, aux_logits = split_outputs(model(inputs))
                sum((logits * weights).sum() for logits in [train_logits, *aux_logits]).backward()
                torch.save({"input": inputs, "weights": weights}, self.path("io.pt"))
                checked("import", arch, NUM_CLASSES, self.path("state.pt"), self.path("io.pt"), self.path("out.pt"))
                out = torch.load(self.path("out.pt"))
                self.assertLessEqual(relative_error(out["logits"], logits), tolerance)
                self.assertLessEqual(relative_error(out["train_logits"], train_logits.detach()), tolerance)
                # A bias followed by a linear layer and a training-mode batch norm has no gradient in
                # exact arithmetic (GhostNet has dozens): both sides must leave it at rounding level.
                zero_level = 1e-6 * max(param.grad.abs().max().item() for param in model.parameters())
                for name, param in model.named_parameters():
                    if param.grad.abs().max().item() < zero_level:
                        self.assertLess(out["grad." + name].abs().max().item(), zero_level, name)
                    else:
                        self.assertLessEqual(relative_error(out["grad." + name], param.grad), tolerance, name)

    def test_dptrain_weights_give_torchvision_the_same_logits(self):
        checked("export", NUM_CLASSES, self.dir.name, *[f"{arch}:{side}" for arch, (side, _) in NUMERIC.items()],
                timeout=900)
        for arch, (side, _) in NUMERIC.items():
            with self.subTest(arch=arch):
                state = torch.load(self.path(os.path.join(arch, "state.pt")))
                io = torch.load(self.path(os.path.join(arch, "io.pt")))
                self.assertIs(type(state), dict)
                with uninitialised():  # every weight comes from dptrain's state dict
                    model = torchvision_model(arch, side)
                self.assertEqual(list(state.keys()), list(model.state_dict().keys()))
                model.load_state_dict(state, strict=True)
                model.eval()
                with torch.no_grad():
                    logits = model(io["input"])
                self.assertLessEqual(relative_error(logits, io["logits"]), 1e-4)

    def test_wrong_num_classes_names_the_entry_and_shapes(self):
        torch.save(dict(torchvision.models.resnet18().state_dict()), self.path("state.pt"))
        torch.save({"input": torch.zeros(2, 3, 32, 32), "weights": torch.zeros(2, 10)}, self.path("io.pt"))
        result = oracle("import", "resnet18", 10, self.path("state.pt"), self.path("io.pt"), self.path("out.pt"))
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr,
                         "error: state dict entry 'fc.weight' has the wrong shape: the model expects [10, 512], "
                         "the state dict has [1000, 512]; check the architecture and num_classes the state dict "
                         "was saved with\n")
        self.assertFalse(os.path.exists(self.path("out.pt")))

    def test_ordered_dict_from_python_gets_a_hint(self):
        torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), self.path("state.pt"))
        torch.save({"input": torch.zeros(2, 3, 32, 32), "weights": torch.zeros(2, 10)}, self.path("io.pt"))
        result = oracle("import", "resnet18", 10, self.path("state.pt"), self.path("io.pt"), self.path("out.pt"))
        self.assertEqual(result.returncode, 1)
        self.assertTrue(result.stderr.startswith(f"error: cannot read state dict file '{self.path('state.pt')}'"),
                        result.stderr)
        self.assertTrue(result.stderr.endswith(
            "; from Python, save a plain dict of tensors: torch.save(dict(model.state_dict()), path)\n"),
            result.stderr)


if __name__ == "__main__":
    unittest.main()

"""dptrain's model zoo against torchvision: every registered architecture has torchvision's
state-dict entries (names, shapes, dtypes, order) and parameter count; for one or more sizes of
each family, weights moved either way give the same eval-mode logits, and one training step's
gradients match with dropout and stochastic depth off.

Drives $DPT_BUILD/bin/dptrain_models_oracle (tests/peer/dptrain_models_oracle.cpp).
"""
import contextlib
import os
import subprocess
import tempfile
import unittest

import torch
import torchvision

from torchvision_zoo import NUM_CLASSES, torchvision_model

BUILD = os.environ.get("DPT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
ORACLE = os.path.join(BUILD, "bin", "dptrain_models_oracle")
DTYPES = {torch.float32: "Float", torch.int64: "Long"}

# Architecture -> the image size its structure is checked at (only ViT's weights depend on it).
STRUCTURE = {name: None for name in [
    "alexnet", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "resnext101_32x8d",
    "resnext101_64x4d", "wide_resnet50_2", "wide_resnet101_2", "squeezenet1_0", "squeezenet1_1",
    "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_s", "efficientnet_v2_m",
    "efficientnet_v2_l", "densenet121", "densenet161", "densenet169", "densenet201"] +
    [f"regnet_{kind}_{size}" for kind in "xy" for size in ["400mf", "800mf", "1_6gf", "3_2gf", "8gf", "16gf", "32gf"]] +
    ["regnet_y_128gf", "convnext_tiny", "convnext_small", "convnext_base", "convnext_large", "googlenet",
     "inception_v3", "ghostnet"]}
# The large ViTs share B/16's code and differ in sizes only: checked at a small input.
STRUCTURE.update({"vit_b_16": 32, "vit_b_32": 64, "vit_l_16": 32, "vit_l_32": 64, "vit_h_14": 28,
                  "vit_ti_16": 32, "vit_s_16": 32})
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


def oracle(*args, timeout=300):
    if not os.path.exists(ORACLE):
        raise AssertionError(f"{ORACLE} is missing: build the target dptrain_models_oracle")
    return subprocess.run([ORACLE, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def checked(*args, timeout=300):
    result = oracle(*args, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"dptrain_models_oracle {args} failed ({result.returncode}): {result.stderr}")
    return result.stdout


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


# torch.nn.init's fills, which every torchvision constructor (and each layer's reset_parameters)
# reaches through the module at call time.
INITS = ["uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
         "xavier_normal_", "constant_", "zeros_", "ones_", "orthogonal_"]


@contextlib.contextmanager
def uninitialised():
    """Models built inside leave their weights as allocated: names, shapes and types are all the
    structure check reads, and filling RegNetY-128GF's or ConvNeXt-L's weights took 11-14 s."""
    saved = {name: getattr(torch.nn.init, name) for name in INITS}
    for name in INITS:
        setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fill in saved.items():
            setattr(torch.nn.init, name, fill)


def relative_error(actual, expected):
    return ((actual - expected).abs().max() / expected.abs().max().clamp(min=1e-12)).item()


class StateDictEntries(unittest.TestCase):
    def test_names_shapes_dtypes_order_and_counts_match_torchvision(self):
        # One process for every architecture: starting LibTorch takes a second.
        listing = checked("keys", NUM_CLASSES, *[f"{arch}:{size}" if size else arch for arch, size in STRUCTURE.items()],
                          timeout=900)
        sections = {}
        for section in listing.split("== ")[1:]:
            arch, *lines = section.splitlines()
            sections[arch] = lines
        self.assertEqual(list(sections), list(STRUCTURE))
        for arch, image_size in STRUCTURE.items():
            with self.subTest(arch=arch):
                with uninitialised():
                    model = torchvision_model(arch, image_size)
                expected = [f"{name} {list(t.shape)} {DTYPES[t.dtype]}" for name, t in model.state_dict().items()]
                expected.append(f"parameters {sum(p.numel() for p in model.parameters())}")
                del model
                self.assertEqual(sections[arch], expected)


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

"""dptrain's model zoo against torchvision, in structure: every registered architecture has
torchvision's state-dict entries (names, shapes, dtypes, order) and parameter count.

The structure is dptrain's own code and torchvision's, whatever the LibTorch: CI runs this in one
leg (ctest label version_independent); test_models_oracle's numerics, which load each family's
state dicts strictly both ways, run on every LibTorch.
"""
import unittest

import torch

from models_oracle import checked, uninitialised
from torchvision_zoo import NUM_CLASSES, torchvision_model

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


if __name__ == "__main__":
    unittest.main()

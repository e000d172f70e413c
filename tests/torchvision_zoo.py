"""Python's side of dptrain's model zoo: each registered architecture as torchvision (or, for
GhostNet, its authors' reference layout) builds it, with the peer tests' 10 classes; without
oneDNN where dptrain runs without it (onednn_guard.py)."""

import torchvision

import ghostnet_reference
import onednn_guard  # noqa: F401 (imported for its effect)

NUM_CLASSES = 10

# DeiT's sizes, which dptrain registers and torchvision builds with its VisionTransformer class:
# (patch, layers, heads, hidden, mlp).
DEIT = {"vit_ti_16": (16, 12, 3, 192, 768), "vit_s_16": (16, 12, 6, 384, 1536)}


def torchvision_model(arch, image_size=None):
    """`arch` with NUM_CLASSES outputs; ViTs for `image_size` pixel inputs (default 224)."""
    if arch == "ghostnet":  # not torchvision's: the GhostNet authors' layout, in ghostnet_reference.py
        return ghostnet_reference.GhostNet(num_classes=NUM_CLASSES)
    if arch in DEIT:
        return torchvision.models.VisionTransformer(image_size or 224, *DEIT[arch], num_classes=NUM_CLASSES)
    kwargs = {"num_classes": NUM_CLASSES}
    if arch.startswith("vit_"):
        kwargs["image_size"] = image_size or 224
    if arch in ("googlenet", "inception_v3"):
        kwargs["init_weights"] = True  # torchvision's default, without its warning
    return getattr(torchvision.models, arch)(**kwargs)

"""torchvision's transform pipelines, read from torchvision's own objects and run fused in C++.

dptrain runs the pipelines of torchvision's classification references as one pass per sample:

    train: RandomResizedCrop, [RandomHorizontalFlip], [AutoAugment | RandAugment |
           TrivialAugmentWide | AugMix], ToTensor (or PILToTensor + ConvertImageDtype(float)),
           [Normalize], [RandomErasing]
    eval:  [Resize, CenterCrop], ToTensor (or PILToTensor + ConvertImageDtype(float)), [Normalize]

`fuse(T.Compose([...]))` reads the arguments of each step and returns the fused transform; any
other step, order or argument dptrain cannot run exactly raises ValueError naming it, rather than
running something else. Random draws come from (seed, epoch, index) alone, so a sample's crop is
the same whatever thread or process builds it.
"""

from . import _C

_TENSOR_STEPS = ("ToTensor", "PILToTensor", "ConvertImageDtype", "ToImage", "ToImageTensor", "ToDtype")
_AUGMENTS = {"AutoAugment", "RandAugment", "TrivialAugmentWide", "AugMix"}


def _name(step):
    return type(step).__name__


def _filter(step):
    mode = getattr(step, "interpolation", None)
    value = getattr(mode, "value", mode)
    if value not in ("bilinear", "bicubic"):
        raise ValueError(f"dptrain.transforms: {_name(step)} with interpolation {value!r}: dptrain resamples "
                         "with PIL's bilinear or bicubic filter; pass interpolation=InterpolationMode.BILINEAR "
                         "(or BICUBIC), as torchvision's references do")
    return value


def _side(size, step):
    """The side of a square output from torchvision's size argument (an int or a (h, w) pair)."""
    if isinstance(size, int):
        return size
    sides = list(size)
    if len(sides) == 1 or (len(sides) == 2 and sides[0] == sides[1]):
        return int(sides[0])
    raise ValueError(f"dptrain.transforms: {_name(step)}(size={size!r}): dptrain's outputs are square")


def _no_fill(step):
    if getattr(step, "fill", None) not in (None, 0, [0], [0, 0, 0]):
        raise ValueError(f"dptrain.transforms: {_name(step)}(fill={step.fill!r}): dptrain fills with black only")


def _augment(step):
    """The policy name and arguments of an automatic augmentation step."""
    _no_fill(step)
    name = _name(step)
    if name == "AutoAugment":
        policy = getattr(step.policy, "value", step.policy)
        return policy, {}
    if name == "RandAugment":
        return "ra", {"num_ops": step.num_ops, "magnitude": step.magnitude,
                      "num_magnitude_bins": step.num_magnitude_bins}
    if name == "TrivialAugmentWide":
        return "ta_wide", {"num_magnitude_bins": step.num_magnitude_bins}
    return "augmix", {"severity": step.severity, "mixture_width": step.mixture_width,
                      "chain_depth": step.chain_depth, "alpha": float(step.alpha), "all_ops": step.all_ops}


def _tensor_steps(steps, at):
    """Where the conversion to a float tensor in [0, 1] ends, from position `at`."""
    name = _name(steps[at]) if at < len(steps) else None
    if name == "ToTensor":
        return at + 1
    if name in ("PILToTensor", "ToImage", "ToImageTensor") and at + 1 < len(steps):
        convert = steps[at + 1]
        dtype = getattr(convert, "dtype", None)
        scales = getattr(convert, "scale", True)
        if _name(convert) in ("ConvertImageDtype", "ToDtype") and str(dtype) == "torch.float32" and scales:
            return at + 2
    found = name or "the end of the pipeline"
    raise ValueError(f"dptrain.transforms: expected ToTensor() (or PILToTensor() + ConvertImageDtype(torch.float)) "
                     f"at step {at}, found {found}")


def _steps(transform):
    steps = list(transform) if isinstance(transform, (list, tuple)) else list(getattr(transform, "transforms",
                                                                                      [transform]))
    for step in steps:
        if hasattr(step, "transforms") and _name(step) == "Compose":
            raise ValueError("dptrain.transforms: nested Compose: give one flat list of steps")
    return steps


def fuse(transform, *, seed=0, image_size=None, dct_scaling=True):
    """The dptrain Transform that runs `transform` (a torchvision Compose, or a list of its steps).

    `image_size` is the side of a dataset whose images are all that square size (CIFAR-10, the
    synthetic set): it lets an eval pipeline without Resize and CenterCrop keep the images as they
    are. `dct_scaling` lets JPEGs decode at 1/2, 1/4 or 1/8 scale when that still covers the crop
    (a few levels off torchvision's pixels, and much faster); turn it off for bit-equal output.
    A dptrain Transform is returned as it is.
    """
    if isinstance(transform, _C.Transform):
        return transform
    if transform is None:
        if image_size is None:
            raise ValueError("dptrain.transforms: a dataset of images of many sizes needs a transform that makes "
                             "them one size (RandomResizedCrop, or Resize + CenterCrop)")
        transform = []
    steps = _steps(transform)
    names = [_name(step) for step in steps]
    options = {"seed": seed, "dct_scaling": dct_scaling, "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}
    at = 0
    if names[:1] == ["RandomResizedCrop"]:
        crop = steps[0]
        options.update(mode="train", size=_side(crop.size, crop), scale=tuple(crop.scale), ratio=tuple(crop.ratio),
                       interpolation=_filter(crop))
        at = 1
        if at < len(steps) and names[at] == "RandomHorizontalFlip":
            options["flip_probability"] = float(steps[at].p)
            at += 1
        if at < len(steps) and names[at] in _AUGMENTS:
            if _filter(steps[at]) != options["interpolation"]:
                raise ValueError(f"dptrain.transforms: {names[at]} samples with the crop's filter in dptrain; give "
                                 f"it interpolation={options['interpolation']!r} too")
            options["auto_augment"], options["augment_arguments"] = _augment(steps[at])
            at += 1
    elif names[:2] == ["Resize", "CenterCrop"]:
        resize, center = steps[0], steps[1]
        if getattr(resize, "max_size", None) is not None:
            raise ValueError("dptrain.transforms: Resize(max_size=...) is not supported")
        options.update(mode="eval", resize=_side(resize.size, resize), size=_side(center.size, center),
                       interpolation=_filter(resize))
        at = 2
    elif image_size is not None:
        options.update(mode="eval", resize=image_size, size=image_size)
    else:
        raise ValueError(f"dptrain.transforms: a pipeline starts with RandomResizedCrop or Resize + CenterCrop "
                         f"here, not {names[:2]}")
    if names:
        at = _tensor_steps(steps, at)
    if at < len(steps) and names[at] == "Normalize":
        options.update(mean=[float(v) for v in steps[at].mean], std=[float(v) for v in steps[at].std])
        at += 1
    if at < len(steps) and names[at] == "RandomErasing" and options["mode"] == "train":
        erase = steps[at]
        if (tuple(erase.scale) != (0.02, 0.33) or tuple(erase.ratio) != (0.3, 3.3) or
                erase.value not in (0, [0], (0,))):
            raise ValueError("dptrain.transforms: RandomErasing runs with torchvision's default scale, ratio and "
                             "value=0 only")
        options["erase_probability"] = float(erase.p)
        at += 1
    if at < len(steps):
        raise ValueError(f"dptrain.transforms: cannot run {names[at]} at step {at} of {names}; see "
                         "help(dptrain.transforms) for the pipelines dptrain fuses")
    return _C.Transform(**options)

"""dptrain for Python training scripts: its datasets, fused transforms, sampler and threaded loader.

    import dptrain
    import torchvision.transforms as T

    train = dptrain.datasets.ImageFolder("/data/imagenet/train", T.Compose([
        T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    sampler = dptrain.DistributedSampler(train)      # rank and world from torch.distributed
    loader = dptrain.Loader(train, batch_size=256, sampler=sampler, num_workers=8)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for images, labels in loader:                 # torch.Tensor batches
            ...

The transforms are torchvision's own objects, run fused in C++ (decode, crop, resize, flip,
augment, normalize, erase in one pass), equal to torchvision's output for the same crop; the
loader's threads build whole batches without the GIL.
"""

import torch  # noqa: F401  (its tensor type must exist before the module hands out tensors)

from ._C import ConfigError, DataError, Error
from . import datasets, transforms
from .loader import Loader
from .sampler import DistributedSampler, EvalSampler

__all__ = ["ConfigError", "DataError", "DistributedSampler", "Error", "EvalSampler", "Loader", "datasets",
           "transforms"]

"""dptrain's datasets for Python: an item is (float image tensor, label), already transformed.

Each takes a torchvision transform pipeline (see dptrain.transforms) and runs it fused in C++.
`dataset[i]` is sample i as augmented at epoch 0, `dataset.get(i, epoch)` at any epoch; the
loader calls the C++ side directly, never these Python methods.
"""

import os

from . import _C
from .transforms import fuse


class ImageFolder(_C.ImageFolder):
    """torchvision.datasets.ImageFolder's layout, classes, sample order and labels: root/<class>/**/<image>.

    JPEG and PNG files are decoded by content. `bad_images`: "fail" raises DataError naming a file
    that cannot be decoded (and refuses a class folder without images, as torchvision does);
    "skip" lets the loader leave such samples out and count them (Loader.skipped).
    """

    def __init__(self, root, transform, *, bad_images="fail", seed=0, dct_scaling=True):
        super().__init__(os.fspath(root), fuse(transform, seed=seed, dct_scaling=dct_scaling), bad_images)


class Shards(_C.ShardSet):
    """A dataset kept as WebDataset tar shards (docs/datasets.md): `spec` is a manifest.json (from
    `dptrain make-shards`), a folder, brace notation ("train-{000000..000146}.tar") or one .tar, on
    disk or at an http(s):// or s3:// URL. A remote set's shards are fetched into `cache_dir`
    (default ~/.cache/dptrain/shards), at most `cache_gib` GiB, shared with the machine's other
    processes, `fetch_streams` shards at once (each over a connection of its own: more fill a link
    with long round trips). An s3:// set is read with the credentials, region and endpoint the AWS
    command line would use (AWS_* variables, then AWS_PROFILE's profile in ~/.aws, its
    credential_process included, then the container's or instance's role; docs/datasets.md).
    Written with `make-shards --order folder`, sample i is the ImageFolder's image i. Pass it to
    DistributedSampler for the shard-aware shuffle (its `shard_sizes`).
    """

    def __init__(self, spec, transform, *, bad_images="fail", seed=0, dct_scaling=True, cache_dir=None,
                 cache_gib=20, fetch_streams=2):
        super().__init__(os.fspath(spec), fuse(transform, seed=seed, dct_scaling=dct_scaling), bad_images,
                         os.fspath(cache_dir) if cache_dir else "", int(cache_gib * 2**30), fetch_streams)


class CIFAR10(_C.Cifar10):
    """CIFAR-10 from its binary distribution (root holds data_batch_1.bin .. test_batch.bin).

    Without a transform an item is torchvision's ToTensor() of the 32x32 image.
    """

    def __init__(self, root, train=True, transform=None, *, seed=0):
        super().__init__(os.fspath(root), train, fuse(transform, seed=seed, image_size=32))


class Synthetic(_C.SyntheticDataset):
    """A learnable synthetic set drawn from (seed, index): each class a shape in its own hue, on
    image_size x image_size pictures; class of sample i is i % num_classes. No files needed.
    `seed` seeds the augmentation, as for the other datasets; `image_seed` the pictures.
    """

    def __init__(self, size=1000, num_classes=10, image_size=64, transform=None, *, seed=0, image_seed=0):
        super().__init__(size, num_classes, image_size, image_seed, fuse(transform, seed=seed, image_size=image_size))

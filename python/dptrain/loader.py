"""A drop-in for torch.utils.data.DataLoader over dptrain's datasets: threads in C++ build whole batches."""

import warnings

import torch

from . import _C
from .sampler import _Shard

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


class Loader:
    """Iterates (images, labels) batches of a dptrain dataset, as torch.utils.data.DataLoader does.

    The arguments are DataLoader's where they mean the same; `num_workers` threads (at least one)
    decode and transform whole batches in C++ without the GIL, `prefetch_factor` batches ahead per
    thread, and batches come out in the sampler's order whatever the timing. Beyond DataLoader:

      dtype          torch.float32, or torch.bfloat16 / torch.float16 for mixed precision
      memory_format  torch.contiguous_format, or torch.channels_last
      bad_images     "fail" raises the dataset's DataError; "skip" leaves bad samples out of their
                     batch, counts them in `skipped` and warns at the end of the epoch

    Augmentation depends on (the transform's seed, epoch, index). The epoch is the sampler's
    (set_epoch) when it has one, else the number of passes this loader has begun.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, num_workers=0, pin_memory=False,
                 drop_last=False, *, prefetch_factor=2, generator=None, dtype=torch.float32,
                 memory_format=torch.contiguous_format, bad_images="fail", collate_fn=None):
        if not isinstance(dataset, _C.Dataset):
            raise TypeError(f"dptrain.Loader reads dptrain's datasets (dptrain.datasets), not {type(dataset).__name__}")
        if collate_fn is not None:
            raise ValueError("dptrain.Loader builds the batches itself: it takes no collate_fn")
        if sampler is not None and shuffle:
            raise ValueError("dptrain.Loader: sampler option is mutually exclusive with shuffle")
        if dtype not in _DTYPES:
            raise ValueError(f"dptrain.Loader: images come as {list(_DTYPES)}, not {dtype}")
        if prefetch_factor is None:  # DataLoader's None: its default, 2 per worker
            prefetch_factor = 2
        if prefetch_factor < 1:
            raise ValueError(f"dptrain.Loader: prefetch_factor is batches built ahead per thread, at least 1, "
                             f"not {prefetch_factor}")
        if pin_memory and not torch.cuda.is_available():
            warnings.warn("dptrain.Loader: pin_memory is set, but no GPU is available: not pinning")
            pin_memory = False
        self.dataset, self.batch_size, self.sampler, self.drop_last = dataset, batch_size, sampler, drop_last
        self.shuffle = bool(shuffle)
        self.num_workers, self.prefetch_factor, self.pin_memory = num_workers, prefetch_factor, pin_memory
        self.dtype, self.memory_format, self.bad_images = dtype, memory_format, bad_images
        self.skipped = []
        self._passes = 0
        # A shuffle draws its seed from torch's generator once, as RandomSampler does, so that
        # torch.manual_seed decides it; each pass then permutes with seed + pass.
        self._shuffle_seed = int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())

    def _order(self, ahead=0):
        """This pass's epoch and sample indices; with `ahead` 1, the next pass's as far as they can
        be known now (a dptrain sampler's next epoch, the next shuffle), else None."""
        if self.sampler is not None:
            epoch = getattr(self.sampler, "epoch", self._passes) + ahead
            if isinstance(self.sampler, _Shard):
                indices = self.sampler.indices_for(epoch)
            elif ahead:
                return None  # a sampler of the user's own: its next epoch is known once set
            else:
                indices = list(self.sampler)
            return epoch, [int(i) for i in indices]
        passes = self._passes + ahead
        if self.shuffle:
            generator = torch.Generator().manual_seed(self._shuffle_seed + passes)
            return passes, torch.randperm(len(self.dataset), generator=generator).tolist()
        return passes, list(range(len(self.dataset)))

    def __len__(self):
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        epoch, indices = self._order()
        following = self._order(ahead=1) if isinstance(self.dataset, _C.ShardSet) else None
        self._passes += 1
        threads = max(1, self.num_workers)
        loader = _C.EpochLoader(dataset=self.dataset, indices=indices, epoch=epoch, batch_size=self.batch_size,
                                threads=threads, prefetch_factor=self.prefetch_factor,
                                drop_last=self.drop_last, bad_images=self.bad_images, pin_memory=self.pin_memory,
                                dtype=_DTYPES[self.dtype], memory_format=self.memory_format)
        # A remote shard set fetches the next pass's first shards once this pass's are in, so that
        # the next pass does not begin by waiting for the link (when the loop goes on as said).
        # Said after the loader, which says this pass's order: a set takes an epoch said again as
        # a new loop and forgets the epochs said after it.
        if following is not None:
            self.dataset.will_read(*following)
        return _Pass(self, loader)


class _Pass:
    """One pass over the loader's order; stops its threads when done or dropped."""

    def __init__(self, owner, loader):
        self._owner, self._loader = owner, loader

    def __iter__(self):
        return self

    def __len__(self):
        return self._loader.num_batches

    def __next__(self):
        if self._loader is None:
            raise StopIteration
        batch = self._loader.next()
        if batch is None:
            self._finish()
            raise StopIteration
        return batch

    def _finish(self):
        skipped = self._loader.skipped
        self._loader.close()
        self._loader = None
        self._owner.skipped = skipped
        if skipped:
            first = "; ".join(what for _, what in skipped[:3])
            warnings.warn(f"dptrain.Loader: skipped {len(skipped)} bad images this epoch (first: {first})")

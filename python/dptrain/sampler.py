"""Samplers with torch.utils.data.DistributedSampler's semantics, computed in C++."""

import os

from . import _C


def _world(num_replicas, rank):
    """The world size and rank: as given, else from torch.distributed, else from the launcher's
    WORLD_SIZE and RANK (dptrain launch and torchrun set them)."""
    if num_replicas is not None and rank is not None:
        world, me = num_replicas, rank
    else:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            world, me = dist.get_world_size(), dist.get_rank()
        elif "WORLD_SIZE" in os.environ and "RANK" in os.environ:
            world, me = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        else:
            raise RuntimeError("dptrain sampler: no world size and rank: pass num_replicas and rank, initialize "
                               "torch.distributed, or start under dptrain launch or torchrun")
        world = num_replicas if num_replicas is not None else world
        me = rank if rank is not None else me
    if world < 1 or not 0 <= me < world:
        raise ValueError(f"dptrain sampler: rank {me} is not in [0, {world})")
    return world, me


class _Shard:
    """A rank's indices, as a sampler iterates them (the C++ sampler in self._sampler)."""

    def indices(self):
        return self._sampler.indices()

    def indices_for(self, epoch):
        """The indices of epoch `epoch` (an EvalSampler's are every epoch's)."""
        return self._sampler.indices()

    def __iter__(self):
        return iter(self._sampler.indices())

    def __len__(self):
        return self._sampler.num_samples


class DistributedSampler(_Shard):
    """torch.utils.data.DistributedSampler: the same indices for the same seed and epoch (the
    permutation of torch.randperm with a generator seeded with seed + epoch, padded or cut to
    divide evenly, rank r taking every world-th from r). Call set_epoch before each epoch.

    For a dataset kept in shards (datasets.Shards) the shuffle is shard-aware: the shards are
    permuted, taken `open_shards` at a time, and the samples of each group permuted among
    themselves, one order for every world size (open_shards=0: one permutation of all samples,
    torch's own).
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False, *,
                 open_shards=8):
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self._sampler = _C.DistributedSampler(dataset_size=len(dataset), world_size=self.num_replicas,
                                              rank=self.rank, shuffle=shuffle, seed=seed, drop_last=drop_last,
                                              shard_sizes=getattr(dataset, "shard_sizes", []),
                                              open_shards=open_shards)

    def set_epoch(self, epoch):
        self._sampler.set_epoch(epoch)

    def indices_for(self, epoch):
        return self._sampler.indices_for(epoch)

    @property
    def epoch(self):
        return self._sampler.epoch

    @property
    def num_samples(self):
        return self._sampler.num_samples

    @property
    def total_size(self):
        return self._sampler.total_size


class EvalSampler(_Shard):
    """Every sample exactly once across the ranks, in order, strided as DistributedSampler (the
    first ranks may get one more): exact distributed evaluation, with no padded duplicates.
    """

    def __init__(self, dataset, num_replicas=None, rank=None):
        self.num_replicas, self.rank = _world(num_replicas, rank)
        self._sampler = _C.EvalSampler(dataset_size=len(dataset), world_size=self.num_replicas, rank=self.rank)

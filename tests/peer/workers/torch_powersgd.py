"""Python PyTorch's side of the PowerSGD oracle test: one rank (env:// rendezvous, gloo) running
torch's powerSGD_hook over the buckets and gradients dptrain_powersgd_oracle wrote to
OUT_DIR/input.<rank>.pt, each bucket waited for before the next is handed over. Writes
OUT_DIR/theirs.<seed>.<rank>.pt, "b<bucket>.s<step>": the bucket's buffer after the hook.

    torch_powersgd.py OUT_DIR RANK START_ITER SEED
"""
import datetime
import re
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

from proc import leave_torch_world


class Bucket:
    """What powerSGD_hook asks of a dist.GradBucket."""

    def __init__(self, index, count, shapes):
        self._index, self._count = index, count
        self._buffer = torch.zeros(sum(torch.Size(s).numel() for s in shapes))
        self._gradients, at = [], 0
        for shape in shapes:
            n = torch.Size(shape).numel()
            self._gradients.append(self._buffer[at:at + n].view(shape))
            at += n

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def gradients(self):
        return self._gradients

    def is_last(self):
        return self._index == self._count - 1


out, rank_limit, start_iter, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
inputs = torch.load(f"{out}/input.{rank}.pt")
layout = {}  # bucket -> {gradient: [steps, *shape]}
for key, value in inputs.items():
    b, g = map(int, re.fullmatch(r"b(\d+)\.g(\d+)", key).groups())
    layout.setdefault(b, {})[g] = value
count = len(layout)
buckets = [Bucket(b, count, [layout[b][g].shape[1:] for g in range(len(layout[b]))]) for b in range(count)]
steps = next(iter(inputs.values())).shape[0]

state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank_limit,
                               start_powerSGD_iter=start_iter, random_seed=seed)
results = {}
for s in range(steps):
    for b, bucket in enumerate(buckets):
        for g, gradient in enumerate(bucket.gradients()):
            gradient.copy_(layout[b][g][s])
        powersgd.powerSGD_hook(state, bucket).wait()
        results[f"b{b}.s{s}"] = bucket.buffer().clone()
torch.save(results, f"{out}/theirs.{seed}.{rank}.pt")
leave_torch_world(dist)

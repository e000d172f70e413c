"""A plain PyTorch script, as the tutorials write it: env:// rendezvous, gloo, all_reduce."""
import datetime

import torch
import torch.distributed as dist

from proc import leave_torch_world

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
expected = world * (world + 1) / 2
assert torch.equal(t, torch.full((4,), expected)), (t, expected)
gathered = [torch.zeros(1) for _ in range(world)]
dist.all_gather(gathered, torch.tensor([float(rank)]))
assert [int(g.item()) for g in gathered] == list(range(world))
dist.barrier()
print(f"torch rank {rank}/{world} ok sum={t[0].item():g}", flush=True)
leave_torch_world(dist)

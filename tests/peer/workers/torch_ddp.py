"""Python PyTorch's side of the DDP oracle test: one rank (env:// rendezvous, gloo), repeating
dptrain_ddp_oracle's run from its initial weights and data. Rank 0 writes OUT_DIR/python_final.pt.
With --batch-norm, the model of the TorchScript case (a batch norm after the convolution). With
--zero, AdamW under torch.distributed.optim.ZeroRedundancyOptimizer, whose state rank 0 writes to
OUT_DIR/python_optimizer.pt."""
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from proc import leave_torch_world

out = sys.argv[1]
torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()

if "--batch-norm" in sys.argv:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
else:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
# The parameters, and batch norm's buffers at their defaults as on dptrain's side.
model.load_state_dict(torch.load(f"{out}/initial.pt"), strict=False)
data = torch.load(f"{out}/data.pt")
ddp = nn.parallel.DistributedDataParallel(model)
zero = "--zero" in sys.argv
if zero:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=0.01, weight_decay=0.05)
else:
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
per_rank = data["x"].shape[1] // dist.get_world_size()
for s in range(data["x"].shape[0]):
    optimizer.zero_grad()
    xs = data["x"][s][rank * per_rank:(rank + 1) * per_rank]
    ys = data["y"][s][rank * per_rank:(rank + 1) * per_rank]
    F.cross_entropy(ddp(xs), ys).backward()
    optimizer.step()
if rank == 0:
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f"{out}/python_final.pt")
if zero:
    optimizer.consolidate_state_dict(to=0)
    if rank == 0:
        torch.save(optimizer.state_dict(), f"{out}/python_optimizer.pt")
leave_torch_world(dist)

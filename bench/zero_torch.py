"""Python PyTorch's side of bench/zero: DistributedDataParallel over Gloo with AdamW, whole on every
rank or sharded by torch.distributed.optim.ZeroRedundancyOptimizer, on synthetic batches (made
once, so no input pipeline is timed). One rank per process, started with the torchrun
environment (`dptrain launch` sets it). Rank 0 prints one JSON line: images/s over the timed
steps (all ranks' images), its peak resident set and the elements of optimizer state it holds."""
import argparse
import datetime
import json
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.distributed.optim import ZeroRedundancyOptimizer

parser = argparse.ArgumentParser()
parser.add_argument("--arch", default="vit_b_16")
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--batch-size", type=int, default=2, help="per process")
parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
parser.add_argument("--steps", type=int, default=4, help="timed steps")
parser.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer around AdamW")
parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: leave torch's default")
args = parser.parse_args()

if args.threads > 0:
    torch.set_num_threads(args.threads)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=900))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
kwargs = {"image_size": args.image_size} if args.arch.startswith("vit") else {}
model = torchvision.models.__dict__[args.arch](num_classes=10, **kwargs)
ddp = torch.nn.parallel.DistributedDataParallel(model)
if args.zero:
    optimizer = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3,
                                        weight_decay=0.05)
else:
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.05)
images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
labels = torch.randint(10, (args.batch_size,))
for step in range(args.warmup + args.steps):
    if step == args.warmup:  # the timed steps start together
        dist.barrier()
        start = time.perf_counter()
    optimizer.zero_grad()
    F.cross_entropy(ddp(images), labels).backward()
    optimizer.step()
dist.barrier()
seconds = time.perf_counter() - start
local = optimizer.optim if args.zero else optimizer
state_numel = sum(t.numel() for s in local.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
if rank == 0:
    print(json.dumps({"images_per_s": round(args.steps * args.batch_size * world / seconds, 3),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "state_numel_rank0": state_numel}), flush=True)
# Ends without tearing down: with torch's default threads, rank 1 of 1.13's Gloo group aborted in
# its exit ("terminate called without an active exception") after every step had completed.
dist.barrier()
os._exit(0)

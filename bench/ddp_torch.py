"""Python PyTorch's side of bench/ddp: the same measurement as `dptrain bench-ddp`, with
torchvision's model and torch.nn.parallel.DistributedDataParallel. One rank per process, started by
`dptrain launch`; rank 0 prints one JSON line with the same fields."""
import argparse
import datetime
import json
import resource
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--arch", default="resnet18")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--image-size", type=int, default=64)
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()

torch.set_num_threads(args.threads)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = getattr(torchvision.models, args.arch)(num_classes=1000)
ddp = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
labels = torch.randint(1000, (args.batch_size,))

for step in range(args.warmup + args.steps):
    if step == args.warmup:
        dist.barrier()
        start = time.perf_counter()
    optimizer.zero_grad()
    F.cross_entropy(ddp(images), labels).backward()
    optimizer.step()
stats = torch.tensor([time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                     dtype=torch.float64)
dist.all_reduce(stats, op=dist.ReduceOp.MAX)
seconds = stats[0].item()
if rank == 0:
    print(json.dumps({"arch": args.arch, "world_size": world, "batch_size_per_rank": args.batch_size,
                      "image_size": args.image_size, "steps": args.steps,
                      "img_s": args.steps * args.batch_size * world / seconds,
                      "step_ms": 1000 * seconds / args.steps, "peak_rss_mb": stats[1].item()}), flush=True)
dist.destroy_process_group()

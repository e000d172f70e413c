"""Python PyTorch's side of bench/ddp: the same measurement as `dptrain bench-ddp`, with
torchvision's model and torch.nn.parallel.DistributedDataParallel. One rank per process, started by
`dptrain launch`; rank 0 prints one JSON line with the same fields. --overlap adds the same
exposed-communication measurement as bench-ddp's: steps under no_sync() and the buckets'
allreduce alone. --comm-hook powersgd registers torch's powerSGD_hook (rank --powersgd-rank, plain
allreduce for the first --powersgd-start-iter steps), as bench-ddp's flag of the same name."""
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
parser.add_argument("--bucket-cap-mb", type=float, default=25)
parser.add_argument("--overlap", action="store_true")
parser.add_argument("--comm-hook", choices=["allreduce", "powersgd"], default="allreduce")
parser.add_argument("--powersgd-rank", type=int, default=1)
parser.add_argument("--powersgd-start-iter", type=int, default=2)  # torch's least with error feedback
parser.add_argument("--allreduce-repeats", type=int, default=3)
args = parser.parse_args()

torch.set_num_threads(args.threads)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
model = getattr(torchvision.models, args.arch)(num_classes=1000)
ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
if args.comm_hook == "powersgd":
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
    powersgd_state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                            start_powerSGD_iter=args.powersgd_start_iter)
    ddp.register_comm_hook(powersgd_state, powersgd.powerSGD_hook)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
labels = torch.randint(1000, (args.batch_size,))


def train_step():
    optimizer.zero_grad()
    F.cross_entropy(ddp(images), labels).backward()
    optimizer.step()


def no_sync_step():
    with ddp.no_sync():
        train_step()


def timed(count, body):
    """Seconds this rank took for `count` calls of `body`, started together on every rank."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(count):
        body()
    return time.perf_counter() - start


def bucket_buffers():
    """One flat float buffer per gradient bucket as DDP reports them (bytes; rebuilt after the first
    step in gradient-ready order), else one for all."""
    logged = ddp._get_ddp_logging_data()
    sizes = str(logged.get("rebuilt_bucket_sizes") or logged.get("bucket_sizes", ""))
    sizes = [int(s) // 4 for s in sizes.split(",") if s.strip()]
    if sum(sizes) != sum(p.numel() for p in model.parameters()):
        sizes = [sum(p.numel() for p in model.parameters())]
    return [torch.ones(n) for n in sizes]


def all_reduce_buckets(buffers):
    """All buckets launched together, then awaited, as DDP's reducer does, no compute beside."""
    for work in [dist.all_reduce(b, async_op=True) for b in buffers]:
        work.wait()


timed(args.warmup, train_step)
# Each synchronized step's seconds; then (--overlap) each step under no_sync(), interleaved with them
# so that both see the same machine load; then the bucket allreduce and the peak RSS.
stats = torch.zeros(2 * args.steps + 2, dtype=torch.float64)
for step in range(args.steps):
    stats[step] = timed(1, train_step)
    if args.overlap:
        stats[args.steps + step] = timed(1, no_sync_step)
buffers = []
if args.overlap:
    buffers = bucket_buffers()
    all_reduce_buckets(buffers)  # warm the connections up
    stats[-2] = timed(args.allreduce_repeats, lambda: all_reduce_buckets(buffers)) / args.allreduce_repeats
stats[-1] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
# The slowest rank sets the pace.
dist.all_reduce(stats, op=dist.ReduceOp.MAX)
step_ms = 1000 * stats[:2 * args.steps].view(2, args.steps)
seconds = stats[:args.steps].sum().item()
if rank == 0:
    report = {"arch": args.arch, "world_size": world, "batch_size_per_rank": args.batch_size,
              "image_size": args.image_size, "steps": args.steps,
              "img_s": args.steps * args.batch_size * world / seconds,
              "step_ms": 1000 * seconds / args.steps, "median_step_ms": step_ms[0].median().item(),
              "peak_rss_mb": stats[-1].item(), "comm_hook": args.comm_hook}
    if args.overlap:
        report.update(no_sync_step_ms=step_ms[1].mean().item(), each_step_ms=step_ms[0].tolist(),
                      each_no_sync_step_ms=step_ms[1].tolist(), allreduce_ms=1000 * stats[-2].item(),
                      allreduce_mb=sum(b.numel() for b in buffers) * 4 / 2**20, buckets=len(buffers))
    print(json.dumps(report), flush=True)
dist.destroy_process_group()

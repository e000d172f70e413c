"""Python PyTorch's side of bench/train: ImageNet training with DistributedDataParallel as the
tutorials and pytorch/examples' imagenet/main.py write it. torchvision's ImageFolder and
transforms, a DataLoader with worker processes over a DistributedSampler, DDP over Gloo, SGD with
momentum, validation split over the ranks by a DistributedSampler with its counts all-reduced, and
rank 0 saving a checkpoint after every epoch. One rank per process, started with the torchrun
environment (`dptrain launch` sets it). Rank 0 prints one JSON line per epoch and a last one for
the run. `--loader dptrain` swaps the dataset, sampler and loader for dptrain's Python module (the
same torchvision transform objects, the loader's threads building batches in C++)."""
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
from torchvision import datasets, transforms

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--arch", default="resnet18")
parser.add_argument("--image-size", type=int, default=128)
parser.add_argument("--batch-size", type=int, default=32, help="per process")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--workers", type=int, default=4, help="DataLoader worker processes per rank")
parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads; 0: leave torch's default")
parser.add_argument("--output", required=True)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--amp", action="store_true", help="bf16 autocast for forward passes (loss in fp32), as dptrain's --amp")
parser.add_argument("--channels-last", action="store_true", help="NHWC model and inputs, as PyTorch's guide advises")
parser.add_argument("--loader", choices=["torchvision", "dptrain"], default="torchvision",
                    help="torchvision's ImageFolder and DataLoader, or dptrain's (workers are then threads)")
args = parser.parse_args()
memory_format = torch.channels_last if args.channels_last else torch.contiguous_format

if args.threads > 0:
    torch.set_num_threads(args.threads)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(args.seed)

normalize = transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
train_transform = transforms.Compose([
    transforms.RandomResizedCrop(args.image_size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
    normalize])
val_transform = transforms.Compose([
    transforms.Resize(args.image_size * 256 // 224), transforms.CenterCrop(args.image_size), transforms.ToTensor(),
    normalize])
train_dir, val_dir = os.path.join(args.data, "train"), os.path.join(args.data, "val")
if args.loader == "dptrain":
    import dptrain
    train_set = dptrain.datasets.ImageFolder(train_dir, train_transform, seed=args.seed)
    val_set = dptrain.datasets.ImageFolder(val_dir, val_transform)
    train_sampler = dptrain.DistributedSampler(train_set, seed=args.seed)
    val_sampler = dptrain.DistributedSampler(val_set, shuffle=False)
    loader_args = dict(batch_size=args.batch_size, num_workers=args.workers, memory_format=memory_format)
    train_loader = dptrain.Loader(train_set, sampler=train_sampler, **loader_args)
    val_loader = dptrain.Loader(val_set, sampler=val_sampler, **loader_args)
else:
    train_set = datasets.ImageFolder(train_dir, train_transform)
    val_set = datasets.ImageFolder(val_dir, val_transform)
    train_sampler = torch.utils.data.distributed.DistributedSampler(train_set, seed=args.seed)
    val_sampler = torch.utils.data.distributed.DistributedSampler(val_set, shuffle=False)
    loader_args = dict(batch_size=args.batch_size, num_workers=args.workers, persistent_workers=args.workers > 0)
    train_loader = torch.utils.data.DataLoader(train_set, sampler=train_sampler, **loader_args)
    val_loader = torch.utils.data.DataLoader(val_set, sampler=val_sampler, **loader_args)

model = torchvision.models.__dict__[args.arch](num_classes=len(train_set.classes)).to(memory_format=memory_format)
ddp = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)


def forward(images):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
        return ddp(images.contiguous(memory_format=memory_format)).float()


def train_epoch():
    ddp.train()
    images_seen = 0
    for images, labels in train_loader:
        loss = F.cross_entropy(forward(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        images_seen += images.size(0)
    return images_seen


def validate():
    ddp.eval()
    counts = torch.zeros(3, dtype=torch.float64)  # correct, samples, loss sum
    with torch.no_grad():
        for images, labels in val_loader:
            logits = forward(images)
            counts += torch.tensor([(logits.argmax(1) == labels).sum().item(), labels.size(0),
                                    F.cross_entropy(logits, labels, reduction="sum").item()], dtype=torch.float64)
    dist.all_reduce(counts)
    return 100.0 * counts[0].item() / counts[1].item(), counts[2].item() / counts[1].item()


start = time.perf_counter()
for epoch in range(args.epochs):
    train_sampler.set_epoch(epoch)
    epoch_start = time.perf_counter()
    seen = torch.tensor([train_epoch()], dtype=torch.float64)
    dist.all_reduce(seen)
    train_s = time.perf_counter() - epoch_start
    val_start = time.perf_counter()
    acc1, loss = validate()
    val_s = time.perf_counter() - val_start
    checkpoint_start = time.perf_counter()
    if rank == 0:
        torch.save({"epoch": epoch + 1, "arch": args.arch, "state_dict": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, os.path.join(args.output, "checkpoint.pth.tar"))
    dist.barrier()
    checkpoint_s = time.perf_counter() - checkpoint_start
    if rank == 0:
        print(json.dumps({"epoch": epoch + 1, "train_s": round(train_s, 3), "val_s": round(val_s, 3),
                          "checkpoint_s": round(checkpoint_s, 3),
                          "epoch_s": round(time.perf_counter() - epoch_start, 3),
                          "train_img_s": round(seen.item() / train_s, 2), "val_acc1": round(acc1, 3),
                          "val_loss": round(loss, 5)}), flush=True)
if rank == 0:
    print(json.dumps({"run_s": round(time.perf_counter() - start, 3), "world_size": world,
                      "peak_rss_mb_rank0": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}),
          flush=True)
dist.destroy_process_group()

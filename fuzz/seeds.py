#!/usr/bin/python3
"""Writes the seed corpora of the image and cifar fuzz targets (fuzz/corpus/<target>/): small
files of every kind the decoders meet, each after the target's choice bytes. Run from the
repository root with the Python that has PIL; the files are committed, so this runs only when the
seeds should change."""
import io
import os

import numpy as np
from PIL import Image

rng = np.random.default_rng(0)


def picture(width, height, mode):
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels).convert(mode)


def encoded(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


images = {
    "baseline.jpg": encoded(picture(20, 14, "RGB"), "JPEG", quality=80),
    "progressive.jpg": encoded(picture(17, 9, "RGB"), "JPEG", progressive=True),
    "gray.jpg": encoded(picture(12, 12, "L"), "JPEG"),
    "cmyk.jpg": encoded(picture(10, 8, "CMYK"), "JPEG"),
    "subsampling444.jpg": encoded(picture(9, 16, "RGB"), "JPEG", subsampling=0),
    "rgb.png": encoded(picture(11, 7, "RGB"), "PNG"),
    "rgba.png": encoded(picture(8, 8, "RGBA"), "PNG"),
    "gray.png": encoded(picture(13, 5, "L"), "PNG"),
    "palette.png": encoded(picture(6, 10, "P"), "PNG"),
    "gray16.png": encoded(Image.fromarray(rng.integers(0, 65535, (6, 6), dtype=np.uint16)), "PNG"),
}
os.makedirs("fuzz/corpus/image", exist_ok=True)
for i, (name, data) in enumerate(sorted(images.items())):
    with open(f"fuzz/corpus/image/{name}", "wb") as f:
        f.write(bytes([i * 37 % 256, i * 91 % 256]) + data)

os.makedirs("fuzz/corpus/cifar", exist_ok=True)
for records, augment in ((1, 0), (2, 1)):
    data = bytearray([augment])
    for _ in range(records):
        data += bytes([int(rng.integers(0, 10))]) + rng.integers(0, 256, 3072, dtype=np.uint8).tobytes()
    with open(f"fuzz/corpus/cifar/{records}-record{'s' if records > 1 else ''}.bin", "wb") as f:
        f.write(data)

# checkpoint: what --pretrained reads (a state dict as torch.save writes it) and what --resume
# reads (the fields of a TrainingCheckpoint), with tensors of a few elements.
import torch  # noqa: E402

os.makedirs("fuzz/corpus/checkpoint", exist_ok=True)
weights = {"conv.weight": torch.ones(2, 1, 1, 1), "fc.bias": torch.arange(3.0), "bn.num_batches_tracked": torch.tensor(4)}
training = {
    "arch": "resnet20", "epoch": 3, "step_in_epoch": 0, "global_step": 96, "global_batch": 64,
    "samples_in_epoch": 0, "world_size": 2, "lr_reference_batch": 256, "best_acc1": 97.5, "seed": 0,
    "sampler": {"seed": 0, "epoch": 3}, "state_dict": weights,
    "optimizer": {"state": {0: {"momentum_buffer": torch.zeros(2)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
    "scaler": {}, "rng_state": torch.zeros(8, dtype=torch.uint8),
}
for name, value in (("weights.pt", weights), ("nested-weights.pt", {"state_dict": weights}), ("training.pt", training)):
    torch.save(value, f"fuzz/corpus/checkpoint/{name}")

# image_folder: trees built entry by entry, (kind, choice, name): kind 0 a folder, 1 a file, 2 a
# link to an earlier entry, 3 a link to nowhere; choice picks the folder (or the link's target).
trees = {
    "two-classes": [(0, 0, b"a"), (0, 0, b"b"), (1, 1, b"x.jpg"), (1, 2, b"Y.PNG"), (1, 0, b"top.jpg")],
    "nested-and-linked": [(0, 0, b"a"), (0, 1, b"sub"), (1, 2, b"1.jpeg"), (2, 1, b"c"), (1, 1, b"n.txt")],
    "odd-names": [(0, 0, b"-cls"), (1, 1, b"\n.jpg"), (1, 1, b"x.JpG"), (1, 1, b"\xff\xfe.png"), (1, 1, b".hid.jpg"),
                  (3, 1, b"dangling.jpg"), (0, 0, b"empty")],
    # a/up -> a: choice 4 is folder 1 (a) of 3 and entry 0 (a) of 4
    "link-to-an-ancestor": [(0, 0, b"a"), (0, 1, b"b"), (1, 2, b"p.png"), (1, 0, b"f.jpg"), (2, 4, b"up")],
}
os.makedirs("fuzz/corpus/image_folder", exist_ok=True)
for name, entries in trees.items():
    with open(f"fuzz/corpus/image_folder/{name}", "wb") as f:
        f.write(b"".join(bytes([kind, choice]) + entry + b"\0" for kind, choice, entry in entries))

# shard: tar archives as make-shards, GNU tar (long names) and pax write them, with images, labels
# and the members a reader leaves alone.
import tarfile  # noqa: E402


def archive(members, fmt):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


samples = [("s0.jpg", images["baseline.jpg"]), ("s0.cls", b"3"), ("s1.png", images["rgb.png"]), ("s1.cls", b"0\n"),
           ("s1.json", b"{}")]
shards = {
    "ustar.tar": archive(samples, tarfile.USTAR_FORMAT),
    "gnu-long-names.tar": archive([("d" * 120 + "/" + n, d) for n, d in samples[:2]], tarfile.GNU_FORMAT),
    "pax.tar": archive([("p" * 130 + "/" + n, d) for n, d in samples[2:]], tarfile.PAX_FORMAT),
}
os.makedirs("fuzz/corpus/shard", exist_ok=True)
for name, data in shards.items():
    with open(f"fuzz/corpus/shard/{name}", "wb") as f:
        f.write(data)

"""ImageNet-like JPEGs for the loader benchmarks (bench/loader, bench/gpu_decode): 500x375 at
quality 90, blurred shapes over gradients with mild noise (not pure noise, which JPEG codes
unlike photographs), in ten class folders, made once per folder."""
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def default_dir(count):
    """Where `count` images are made unless told otherwise: one folder per count, since the loaders
    read every image under it."""
    return os.path.join("/tmp", "dptrain_bench_loader", str(count))


def generate(root, count, classes=10, seed=0):
    marker = os.path.join(root, f".complete-{count}-{classes}-{seed}")
    if os.path.exists(marker):
        return
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(count):
        cls = i % classes
        folder = os.path.join(root, f"class_{cls:02d}")
        os.makedirs(folder, exist_ok=True)
        a, b = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
        t = (xx * rng.uniform(-1, 1) + yy * rng.uniform(-1, 1)) / 600.0 + 0.5
        base = np.clip(a[None, None, :] * (1 - t[..., None]) + b[None, None, :] * t[..., None], 0, 255)
        img = Image.fromarray(base.astype(np.uint8))
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(6, 14))):
            x0, y0 = rng.uniform(-50, 480), rng.uniform(-50, 360)
            x1, y1 = x0 + rng.uniform(20, 220), y0 + rng.uniform(20, 180)
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            if rng.uniform() < 0.5:
                draw.ellipse([x0, y0, x1, y1], fill=colour)
            else:
                draw.polygon([(x0, y0), (x1, y0 + rng.uniform(-40, 40)), (x0 + rng.uniform(-40, 40), y1)], fill=colour)
        img = img.filter(ImageFilter.GaussianBlur(1.2))
        noisy = np.asarray(img, dtype=np.float32) + rng.normal(0, 6, (375, 500, 3))
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(
            os.path.join(folder, f"{i:06d}.jpg"), quality=90)
    open(marker, "w").close()

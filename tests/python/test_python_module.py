"""`import dptrain` against torchvision and torch.utils.data: the fused transforms equal
torchvision's output for the same crop, ImageFolder lists what torchvision's does, the sampler's
indices equal torch's, and the loader's batches are the dataset's samples in the sampler's order."""

import io
import os
import subprocess
import sys
import tempfile
import threading
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torchvision  # noqa: E402
import torchvision.transforms as T  # noqa: E402
import torchvision.transforms.functional as F  # noqa: E402
from PIL import Image  # noqa: E402

from http_server import Server, nginx_command  # noqa: E402
from module_path import import_dptrain  # noqa: E402
from proc import free_port, installed_for_test  # noqa: E402

dptrain = import_dptrain()

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def picture(width, height, seed):
    """A smooth RGB picture with detail (JPEG keeps it close; every resize filter tap matters)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(3, height // 4 + 1, width // 4 + 1, generator=g)
    up = torch.nn.functional.interpolate(base[None], size=(height, width), mode="bilinear", align_corners=False)[0]
    pixels = (up * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()
    return Image.fromarray(pixels.numpy())


def resized_crop(image, top, left, height, width, size):
    """torchvision's F.resized_crop on a PIL image, as Pillow before 13 computes it: the horizontal
    pass first, then the vertical one. Debian's Pillow 13 runs the vertical pass first where the
    crop loses more rows than twice the columns it loses (or loses rows and gains columns), which
    moves some values by one level; dptrain keeps the order of Pillow up to 12."""
    if int(Image.__version__.split(".")[0]) < 13:
        return F.resized_crop(image, top, left, height, width, size)
    out_height, out_width = size
    crop = image.crop((left, top, left + width, top + height))
    return crop.resize((out_width, height), Image.BILINEAR).resize((out_width, out_height), Image.BILINEAR)


def write_folder(root, bad=False):
    """Three classes of JPEGs and PNGs of several sizes (sub-folders too), and with `bad` a file
    that is no image."""
    sizes = [(64, 48), (50, 75), (96, 96), (40, 33)]
    for c, name in enumerate(["cat", "dog", "emu"]):
        os.makedirs(os.path.join(root, name, "more"))
        for k in range(4):
            image = picture(*sizes[(c + k) % 4], seed=10 * c + k)
            where = os.path.join(root, name, "more" if k == 3 else "", f"{k}.{'png' if k % 2 else 'jpg'}")
            image.save(where, quality=92) if where.endswith("jpg") else image.save(where)
    if bad:
        with open(os.path.join(root, "dog", "broken.jpg"), "wb") as f:
            f.write(b"\xff\xd8\xff\xe0 this is not a JPEG")


class TransformsEqualTorchvision(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        write_folder(cls.dir.name)
        cls.reference = torchvision.datasets.ImageFolder(cls.dir.name)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_image_folder_lists_what_torchvision_lists(self):
        ours = dptrain.datasets.ImageFolder(self.dir.name, T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()]))
        self.assertEqual(ours.classes, self.reference.classes)
        self.assertEqual(ours.samples, self.reference.samples)
        self.assertEqual(ours.targets, self.reference.targets)
        self.assertEqual(len(ours), 12)

    def test_shards_in_the_folder_s_order_are_the_folder_bit_for_bit(self):
        """make-shards --order folder: the same classes, labels and samples, PNGs included; the
        sampler's shard-aware shuffle is a permutation of them."""
        with tempfile.TemporaryDirectory() as out:
            cli = os.path.join(os.environ.get("DPT_BUILD", "build"), "bin", "dptrain")
            subprocess.run([cli, "make-shards", self.dir.name, out, "--order", "folder", "--shard-size", "0.02"],
                           check=True, capture_output=True, timeout=60)
            crop = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])
            shards = dptrain.datasets.Shards(out, crop, seed=4)
            folder = dptrain.datasets.ImageFolder(self.dir.name, crop, seed=4)
            self.assertEqual((shards.classes, shards.targets), (folder.classes, folder.targets))
            self.assertGreater(len(shards.shard_sizes), 1)
            for i in range(len(folder)):
                for epoch in (0, 2):
                    ours, theirs = shards.get(i, epoch), folder.get(i, epoch)
                    self.assertTrue(torch.equal(ours[0], theirs[0]) and ours[1] == theirs[1], (i, epoch))
            sampler = dptrain.DistributedSampler(shards, num_replicas=1, rank=0, open_shards=1)
            self.assertEqual(sorted(sampler.indices()), list(range(len(folder))))
            self.assertNotEqual(sampler.indices(), dptrain.DistributedSampler(folder, num_replicas=1, rank=0).indices())

    def test_a_set_over_http_reads_as_the_set_on_disk(self):
        """A shard set at an http:// URL (nginx on loopback): the same samples as on disk, its
        shards fetched into the cache folder given, one at a time (fetch_streams=1)."""
        nginx = installed_for_test("nginx")
        with tempfile.TemporaryDirectory() as tmp:
            cli = os.path.join(os.environ.get("DPT_BUILD", "build"), "bin", "dptrain")
            local = os.path.join(tmp, "www", "set")
            subprocess.run([cli, "make-shards", self.dir.name, local, "--shard-size", "0.02"], check=True,
                           capture_output=True, timeout=60)
            port = free_port()
            server = Server(nginx_command(nginx, os.path.join(tmp, "www"), port, os.path.join(tmp, "nginx")), port,
                            os.path.join(tmp, "nginx.out"))
            try:
                crop = T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip(), T.ToTensor()])
                cache = os.path.join(tmp, "cache")
                remote = dptrain.datasets.Shards(f"http://127.0.0.1:{port}/set", crop, seed=4, cache_dir=cache,
                                                 cache_gib=0.01, fetch_streams=1)
                on_disk = dptrain.datasets.Shards(local, crop, seed=4)
                self.assertEqual((remote.classes, remote.targets), (on_disk.classes, on_disk.targets))
                sampler = dptrain.DistributedSampler(remote, num_replicas=1, rank=0, open_shards=1)
                batches = list(dptrain.Loader(remote, batch_size=4, sampler=sampler))
                order = sampler.indices()
                images = torch.cat([images for images, _ in batches])
                self.assertTrue(torch.equal(images, torch.stack([on_disk.get(i, 0)[0] for i in order])))
                fetched = sorted(name.split("-", 1)[1] for name in os.listdir(cache) if name.endswith(".tar"))
                self.assertEqual(fetched, sorted(name for name in os.listdir(local) if name.endswith(".tar")))
            finally:
                server.close()

    def test_each_pass_tells_a_shard_set_the_next_one_s_order(self):
        """Over a shard set the loader says the next pass's order as a pass begins (a remote set
        then fetches its first shards ahead): a dptrain sampler's next epoch, the next shuffle."""
        said = []

        class Recording(dptrain.datasets.Shards):
            def will_read(self, epoch, indices):
                said.append((epoch, list(indices)))
                super().will_read(epoch, indices)

        with tempfile.TemporaryDirectory() as out:
            cli = os.path.join(os.environ.get("DPT_BUILD", "build"), "bin", "dptrain")
            subprocess.run([cli, "make-shards", self.dir.name, out, "--shard-size", "0.02"], check=True,
                           capture_output=True, timeout=60)
            shards = Recording(out, T.Compose([T.Resize(8), T.CenterCrop(8), T.ToTensor()]))
            sampler = dptrain.DistributedSampler(shards, num_replicas=1, rank=0, open_shards=1)
            loader = dptrain.Loader(shards, batch_size=4, sampler=sampler)
            for epoch in (0, 1):
                sampler.set_epoch(epoch)
                this_epoch = sampler.indices()
                list(loader)
                sampler.set_epoch(epoch + 1)
                self.assertEqual(said[-1], (epoch + 1, sampler.indices()))
                self.assertNotEqual(said[-1][1], this_epoch)
            shuffled = dptrain.Loader(shards, batch_size=len(shards), shuffle=True)
            first_labels = next(iter(shuffled))[1].tolist()
            following = said[-1][1]
            self.assertEqual(next(iter(shuffled))[1].tolist(), [shards.targets[i] for i in following])
            self.assertNotEqual(first_labels, [shards.targets[i] for i in following])

    def test_eval_pipeline_is_torchvision_s_bit_for_bit(self):
        for filter_ in (T.InterpolationMode.BILINEAR, T.InterpolationMode.BICUBIC):
            steps = [T.Resize(40, interpolation=filter_), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)]
            ours = dptrain.datasets.ImageFolder(self.dir.name, T.Compose(steps), dct_scaling=False)
            theirs = torchvision.datasets.ImageFolder(self.dir.name, T.Compose(steps))
            for i in range(len(ours)):
                image, label = ours[i]
                expected, expected_label = theirs[i]
                self.assertEqual(label, expected_label)
                self.assertLess((image - expected).abs().max().item(), 1e-6, f"sample {i}, {filter_}")

    def test_train_pipeline_is_torchvision_s_on_the_same_crop(self):
        # torchvision draws its crop, flip and erased box from the global RNG, dptrain from
        # (seed, epoch, index): replay dptrain's draws with torchvision's functional transforms.
        steps = [T.RandomResizedCrop(24, scale=(0.2, 1.0)), T.RandomHorizontalFlip(), T.PILToTensor(),
                 T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD), T.RandomErasing(0.5)]
        fused = dptrain.transforms.fuse(T.Compose(steps), seed=5, dct_scaling=False)
        ours = dptrain.datasets.ImageFolder(self.dir.name, fused)
        flips = erased = 0
        for epoch in (0, 3):
            for i in range(len(ours)):
                path, _ = self.reference.samples[i]
                image = torchvision.datasets.folder.pil_loader(path)
                plan = fused.plan(image.width, image.height, epoch, i)
                expected = resized_crop(image, plan["top"], plan["left"], plan["height"], plan["width"], [24, 24])
                if plan["flip"]:
                    expected = F.hflip(expected)
                    flips += 1
                expected = F.normalize(F.to_tensor(expected), MEAN, STD)
                if plan["erase"] is not None:
                    expected = F.erase(expected, *plan["erase"], torch.tensor(0.0))
                    erased += 1
                got, _ = ours.get(i, epoch)
                self.assertLess((got - expected).abs().max().item(), 1e-6, f"sample {i}, epoch {epoch}, {plan}")
        # Both draws happened both ways (so the replay checked flipped, erased and plain samples).
        self.assertTrue(0 < flips < 24 and 0 < erased < 24, (flips, erased))
        # A different epoch is another crop: the comparison above would catch a wrong epoch.
        self.assertFalse(torch.equal(ours.get(0, 0)[0], ours.get(0, 3)[0]))

    def test_scaled_jpeg_decoding_stays_within_a_few_levels(self):
        steps = [T.Resize(24), T.CenterCrop(24), T.ToTensor()]
        scaled = dptrain.datasets.ImageFolder(self.dir.name, T.Compose(steps))
        theirs = torchvision.datasets.ImageFolder(self.dir.name, T.Compose(steps))
        worst = 0
        for i in range(len(scaled)):
            ours, expected = scaled[i][0], theirs[i][0]
            # libjpeg's scaled IDCT is another low-pass filter than PIL's: some levels off on this
            # detailed picture (up to 9 on average here), while the same output one pixel off (a
            # wrong crop) is 17 or more: the bound tells them apart.
            self.assertLess((ours - expected).abs().mean().item(), 12 / 255, i)
            self.assertGreater((ours[:, 1:] - expected[:, :-1]).abs().mean().item(), 15 / 255, i)
            worst = max(worst, (ours - expected).abs().max().item())
        # Never exact on every JPEG (else the bit-exact test would not need dct_scaling=False).
        self.assertGreater(worst, 0)
        self.assertLess(worst, 64 / 255)

    def test_augmentations_take_torchvision_s_arguments(self):
        bilinear = T.InterpolationMode.BILINEAR
        for augment in (T.AutoAugment(interpolation=bilinear), T.RandAugment(num_ops=3, interpolation=bilinear),
                        T.TrivialAugmentWide(interpolation=bilinear), T.AugMix(interpolation=bilinear)):
            fused = dptrain.transforms.fuse(T.Compose([T.RandomResizedCrop(16), augment, T.ToTensor()]))
            self.assertTrue(fused.plan(40, 30, 0, 1)["augmented"], type(augment).__name__)
            ours = dptrain.datasets.ImageFolder(self.dir.name, fused)
            plain = dptrain.datasets.ImageFolder(self.dir.name, T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))
            changed = sum(not torch.equal(ours[i][0], plain[i][0]) for i in range(len(ours)))
            self.assertGreater(changed, len(ours) // 2, type(augment).__name__)

    def test_what_dptrain_cannot_run_exactly_is_refused_by_name(self):
        cases = {
            "ColorJitter": [T.RandomResizedCrop(8), T.ColorJitter(0.4), T.ToTensor()],
            "interpolation 'nearest'": [T.RandomResizedCrop(8), T.TrivialAugmentWide(), T.ToTensor()],
            "square": [T.Resize(8), T.CenterCrop((8, 6)), T.ToTensor()],
            "RandomErasing runs": [T.RandomResizedCrop(8), T.ToTensor(), T.RandomErasing(value=1)],
            "expected ToTensor": [T.Resize(8), T.CenterCrop(8), T.Normalize(MEAN, STD)],
            "many sizes": None,
        }
        for fragment, steps in cases.items():
            with self.assertRaises(ValueError) as caught:
                dptrain.transforms.fuse(None if steps is None else T.Compose(steps))
            self.assertIn(fragment, str(caught.exception))

    def test_bad_bytes_raise_data_error_never_crash(self):
        # Truncated and bit-flipped JPEG and PNG files (the decoders are fuzzed in C++; this proves
        # the error crosses into Python as an exception carrying the decoder's reason).
        fused = dptrain.transforms.fuse(T.Compose([T.RandomResizedCrop(16), T.ToTensor()]))
        g = torch.Generator().manual_seed(3)
        raised = decoded = 0
        for fmt in ("JPEG", "PNG"):
            encoded = io.BytesIO()
            picture(40, 30, seed=1).save(encoded, fmt)
            good = encoded.getvalue()
            self.assertEqual(fused(good, 0, 1).shape, (3, 16, 16))
            for k in range(150):
                data = bytearray(good[:int(torch.randint(1, len(good), (1,), generator=g))] if k % 2 else good)
                for _ in range(int(torch.randint(0, 8, (1,), generator=g))):
                    data[int(torch.randint(0, len(data), (1,), generator=g))] ^= 1 << int(
                        torch.randint(0, 8, (1,), generator=g))
                try:
                    out = fused(bytes(data), 0, k)
                    self.assertTrue(torch.isfinite(out).all())
                    decoded += 1
                except dptrain.DataError as e:
                    self.assertIn("<bytes>", str(e))
                    raised += 1
        self.assertGreater(raised, 50)
        self.assertEqual(raised + decoded, 300)

    def test_cifar_without_a_transform_is_to_tensor(self):
        images = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
        with tempfile.TemporaryDirectory() as root:
            records = b"".join(bytes([k % 10]) + images[k].numpy().tobytes() for k in range(5))
            with open(os.path.join(root, "test_batch.bin"), "wb") as f:
                f.write(records)
            cifar = dptrain.datasets.CIFAR10(root, train=False)
            self.assertEqual(cifar.targets, [0, 1, 2, 3, 4])
            for k in range(5):
                self.assertTrue(torch.equal(cifar[k][0], images[k].float() / 255), k)
            with self.assertRaises(dptrain.DataError) as caught:
                dptrain.datasets.CIFAR10(root, train=True)
            self.assertIn("data_batch_1.bin", str(caught.exception))


class SamplerEqualsTorch(unittest.TestCase):
    def test_indices_equal_torch_distributed_sampler(self):
        checked = 0
        for n in (1, 10, 17, 64):
            for world in (1, 2, 3, 5):
                for shuffle in (False, True):
                    for drop_last in (False, True):
                        if drop_last and n < world:
                            continue
                        for rank in range(world):
                            data = range(n)
                            ours = dptrain.DistributedSampler(data, world, rank, shuffle, seed=7, drop_last=drop_last)
                            theirs = torch.utils.data.DistributedSampler(data, world, rank, shuffle, seed=7,
                                                                         drop_last=drop_last)
                            for epoch in (0, 4):
                                ours.set_epoch(epoch)
                                theirs.set_epoch(epoch)
                                self.assertEqual(list(ours), list(theirs), (n, world, rank, shuffle, drop_last))
                                self.assertEqual(len(ours), len(theirs))
                                checked += 1
        self.assertGreater(checked, 200)

    def test_world_comes_from_the_launcher_s_environment(self):
        saved = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK")}
        try:
            os.environ.update(WORLD_SIZE="3", RANK="2")
            sampler = dptrain.DistributedSampler(range(9), shuffle=False)
            self.assertEqual(list(sampler), [2, 5, 8])
            os.environ.update(RANK="3")
            with self.assertRaises(ValueError):
                dptrain.DistributedSampler(range(9))
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)

    def test_eval_sampler_reads_every_sample_once(self):
        shards = [list(dptrain.EvalSampler(range(11), 3, r)) for r in range(3)]
        self.assertEqual(shards, [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]])


class LoaderBatches(unittest.TestCase):
    def setUp(self):
        self.train = dptrain.datasets.Synthetic(
            50, 5, 20, T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip(), T.ToTensor()]), seed=3)

    def test_batches_are_the_samples_in_the_sampler_s_order(self):
        sampler = dptrain.DistributedSampler(self.train, 2, 1, seed=4)
        sampler.set_epoch(6)
        for workers in (0, 3):
            loader = dptrain.Loader(self.train, batch_size=8, sampler=sampler, num_workers=workers)
            self.assertEqual(len(loader), 4)
            order = list(sampler)
            got = list(loader)
            self.assertEqual([len(labels) for _, labels in got], [8, 8, 8, 1])
            images = torch.cat([i for i, _ in got])
            labels = torch.cat([l for _, l in got])
            self.assertEqual(labels.tolist(), [i % 5 for i in order])
            for k, index in enumerate(order):
                # The sampler's epoch keys the augmentation: epoch 6, not 0.
                self.assertTrue(torch.equal(images[k], self.train.get(index, 6)[0]), (workers, k))
            self.assertFalse(torch.equal(images[0], self.train.get(order[0], 0)[0]))

    def test_drop_last_and_a_torch_sampler(self):
        sampler = torch.utils.data.DistributedSampler(range(50), 3, 0, seed=1)
        sampler.set_epoch(2)
        loader = dptrain.Loader(self.train, batch_size=5, sampler=sampler, drop_last=True)
        batches = list(loader)
        self.assertEqual(len(batches), len(loader))
        self.assertEqual(len(batches), 3)
        self.assertEqual(torch.cat([l for _, l in batches]).tolist(), [i % 5 for i in list(sampler)[:15]])
        # Any iterable of indices serves, also one with an `indices` attribute of its own.
        subset = torch.utils.data.SubsetRandomSampler([3, 1, 4], generator=torch.Generator().manual_seed(0))
        labels = next(iter(dptrain.Loader(self.train, batch_size=3, sampler=subset)))[1]
        self.assertEqual(sorted(labels.tolist()), [1, 3, 4])

    def test_shuffle_follows_torch_manual_seed_and_changes_every_pass(self):
        def passes(seed):
            torch.manual_seed(seed)
            loader = dptrain.Loader(self.train, batch_size=50, shuffle=True)
            return [next(iter(loader))[1].tolist() for _ in range(2)]

        first, second = passes(1)
        self.assertEqual(passes(1), [first, second])
        self.assertNotEqual(first, second)
        self.assertNotEqual(passes(2)[0], first)
        self.assertEqual(sorted(first), sorted(i % 5 for i in range(50)))

    def test_mixed_precision_batches(self):
        loader = dptrain.Loader(self.train, batch_size=10, dtype=torch.bfloat16, memory_format=torch.channels_last)
        plain = dptrain.Loader(self.train, batch_size=10)
        for (images, _), (expected, _) in zip(loader, plain):
            self.assertEqual(images.dtype, torch.bfloat16)
            self.assertTrue(images.is_contiguous(memory_format=torch.channels_last))
            self.assertTrue(torch.equal(images, expected.to(torch.bfloat16).contiguous(
                memory_format=torch.channels_last)))

    def test_the_gil_is_free_while_a_batch_is_built(self):
        # A thread counts while another waits in the loader: holding the GIL through a batch
        # would leave the count where it was.
        big = dptrain.datasets.Synthetic(64, 5, 256, T.Compose([T.RandomResizedCrop(224), T.ToTensor()]))
        counter, done = [0], threading.Event()

        def count():
            while not done.is_set():
                counter[0] += 1

        thread = threading.Thread(target=count)
        thread.start()
        try:
            before = counter[0]
            images, _ = next(iter(dptrain.Loader(big, batch_size=64, num_workers=1)))
            during = counter[0] - before
        finally:
            done.set()
            thread.join(10)
        self.assertEqual(images.shape, (64, 3, 224, 224))
        self.assertGreater(during, 1000)

    def test_bad_images_fail_or_are_skipped_and_counted(self):
        with tempfile.TemporaryDirectory() as root:
            write_folder(root, bad=True)
            steps = T.Compose([T.Resize(16), T.CenterCrop(16), T.ToTensor()])
            strict = dptrain.datasets.ImageFolder(root, steps)
            with self.assertRaises(dptrain.DataError) as caught:
                list(dptrain.Loader(strict, batch_size=4))
            self.assertIsInstance(caught.exception, OSError)
            self.assertIn("broken.jpg", str(caught.exception))
            lenient = dptrain.datasets.ImageFolder(root, steps, bad_images="skip")
            loader = dptrain.Loader(lenient, batch_size=4, bad_images="skip", num_workers=2)
            with warnings.catch_warnings(record=True) as caught_warnings:
                warnings.simplefilter("always")
                labels = torch.cat([l for _, l in loader])
            self.assertEqual(len(labels), 12)
            self.assertEqual(len(loader.skipped), 1)
            self.assertIn("broken.jpg", loader.skipped[0][1])
            self.assertTrue(any("skipped 1 bad images" in str(w.message) for w in caught_warnings))

    def test_misuse_is_refused(self):
        with self.assertRaises(TypeError):
            dptrain.Loader(list(range(4)))
        with self.assertRaises(ValueError):
            dptrain.Loader(self.train, sampler=range(4), shuffle=True)
        with self.assertRaises(ValueError) as caught:
            dptrain.Loader(self.train, num_workers=2, prefetch_factor=0)
        self.assertIn("at least 1, not 0", str(caught.exception))
        self.assertEqual(dptrain.Loader(self.train, num_workers=2, prefetch_factor=None).prefetch_factor, 2)
        with self.assertRaises(dptrain.ConfigError) as caught:
            list(dptrain.Loader(self.train, batch_size=0))
        self.assertIn("batch size", str(caught.exception))


if __name__ == "__main__":
    unittest.main()

"""`dptrain make-shards` and training from tar shards: a set written in the folder's order trains
bit for bit as its ImageFolder does; the shard-aware shuffle resumes mid-epoch bit for bit; shards
written by `tar` and Python's tarfile (no index, no manifest) train; damaged shards are named
before training starts; --max-side resizes as PIL resizes and keeps what already fits; an elastic
resume at another world size trains each sample of the epoch once, as --sample-log shows; CIFAR-10's
files become shards of PNGs with their pixels."""

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import unittest

from proc import dptrain, run
from train_runs import compare_checkpoints, last_json

RUN = ["-a", "resnet20", "--image-size", "24", "-b", "8", "-j", "2", "--lr", "0.2", "--seed", "3",
       "--deterministic", "-p", "100"]


def launch(*args):
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train", *args]


class Shards(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dpt_shards_")
        cls.folder = os.path.join(cls.tmp.name, "folder")
        code, out, err = run([dptrain(), "make-dataset", cls.folder, "--train-size", "96", "--val-size", "40",
                              "--classes", "4", "--image-size", "32"], timeout=60)
        assert code == 0, out + err

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.tmp.name, *parts)

    def make_shards(self, out, *flags):
        return self.make_shards_of(self.folder, out, *flags)

    def make_shards_of(self, source, out, *flags):
        code, stdout, err = run([dptrain(), "make-shards", source, out, "--shard-size", "0.04", *flags], timeout=60)
        self.assertEqual(code, 0, stdout + err)
        return json.loads(stdout.strip().splitlines()[-1])

    def test_a_set_in_the_folders_order_trains_as_the_folder_bitwise(self):
        report = self.make_shards(self.path("in_order"), "--order", "folder")
        self.assertEqual((report["train"]["samples"], report["val"]["samples"]), (96, 40))
        self.assertGreater(report["train"]["shards"], 3)
        runs = {}
        for name, data in (("folder", self.folder), ("shards", self.path("in_order"))):
            out_dir = self.path("run_" + name)
            code, out, err = run(launch(data, *RUN, "--epochs", "2", "--open-shards", "0", "--output", out_dir),
                                 timeout=240)
            self.assertEqual(code, 0, out + err)
            runs[name] = (last_json(out), os.path.join(out_dir, "checkpoint.pt"))
        self.assertEqual(runs["folder"][0]["val"], runs["shards"][0]["val"])
        comparison = compare_checkpoints(runs["folder"][1], runs["shards"][1])
        self.assertTrue(comparison.bitwise and comparison.optimizer_bitwise, comparison)
        # The shard-aware shuffle is another order: the same data, other weights.
        code, out, err = run(launch(self.path("in_order"), *RUN, "--epochs", "2", "--open-shards", "2",
                                    "--output", self.path("run_aware")), timeout=240)
        self.assertEqual(code, 0, out + err)
        self.assertFalse(compare_checkpoints(runs["folder"][1], self.path("run_aware", "checkpoint.pt")).bitwise)

    def test_the_shard_aware_order_resumes_mid_epoch_bitwise(self):
        self.make_shards(self.path("shuffled"), "--seed", "4")
        args = [self.path("shuffled"), *RUN, "--epochs", "2", "--open-shards", "2"]
        code, out, err = run(launch(*args, "--max-steps", "9", "--output", self.path("straight")), timeout=240)
        self.assertEqual(code, 0, out + err)
        code, out, err = run(launch(*args, "--max-steps", "4", "--output", self.path("halves")), timeout=240)
        self.assertEqual(code, 0, out + err)
        code, out, err = run(launch(*args, "--max-steps", "9", "--output", self.path("halves"),
                                    "--resume", self.path("halves", "checkpoint.pt")), timeout=240)
        self.assertEqual(code, 0, out + err)
        comparison = compare_checkpoints(self.path("straight", "checkpoint.pt"), self.path("halves", "checkpoint.pt"))
        self.assertEqual(comparison.positions, "9 1 3 9 1 3")
        self.assertTrue(comparison.bitwise and comparison.optimizer_bitwise, comparison)

    def test_an_elastic_resume_trains_every_sample_of_the_epoch_once(self):
        """4 ranks train 2 of the 3 steps of epoch 0 (batches of 8), then 3 ranks resume mid-epoch
        (2 steps for the 32 samples left, 4 for epoch 1): the samples the two runs' --sample-log
        files name cover each epoch once, but for the one sample DistributedSampler repeats so that
        3 ranks get equal shares of the 32 left."""
        self.make_shards(self.path("elastic_set"), "--seed", "5")
        args = [self.path("elastic_set"), *RUN, "--epochs", "2", "--open-shards", "2", "--output",
                self.path("elastic")]
        for world, steps, log in (("4", "2", "first"), ("3", "8", "second")):
            command = launch(*args, "--max-steps", steps, "--resume", "auto", "--sample-log",
                             self.path("elastic", log, "samples.txt"))
            command[command.index("--nproc-per-node") + 1] = world
            code, out, err = run(command, timeout=240)
            self.assertEqual(code, 0, out + err)
        self.assertIn("world size 4 -> 3", out)
        trained = {}  # epoch -> every index trained in it, over the steps the final weights hold
        for log, ranks, steps in (("first", 4, range(1, 3)), ("second", 3, range(3, 9))):
            for rank in range(ranks):
                with open(self.path("elastic", log, f"samples.rank{rank}.txt")) as f:
                    lines = [[int(x) for x in line.split()] for line in f]
                self.assertEqual([line[0] for line in lines], list(steps), (log, rank))
                for step, epoch, *indices in lines:
                    trained.setdefault(epoch, []).extend(indices)
        self.assertEqual(sorted(trained), [0, 1])
        self.assertEqual(sorted(set(trained[0])), list(range(96)))
        self.assertEqual(len(trained[0]), 97)  # 64 by 4 ranks, then 32 padded to 33 for 3
        self.assertEqual(sorted(trained[1]), list(range(96)))

    def test_cifar_files_become_shards_of_pngs_with_their_pixels(self):
        """make-shards on CIFAR-10's binary files: train/ from data_batch_*.bin (shuffled), val/
        from test_batch.bin in its order, each record a PNG that PIL decodes to the record's
        pixels, under the class names of batches.meta.txt."""
        from PIL import Image
        cifar = self.path("cifar")
        code, out, err = run([dptrain(), "make-dataset", cifar, "--format", "cifar", "--train-size", "60",
                              "--val-size", "20"], timeout=60)
        self.assertEqual(code, 0, out + err)
        names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
        with open(os.path.join(cifar, "batches.meta.txt"), "w") as f:
            f.write("\n".join(names) + "\n\n")
        report = self.make_shards_of(cifar, self.path("cifar_shards"))
        self.assertEqual((report["train"]["samples"], report["val"]["samples"]), (60, 20))
        with open(os.path.join(cifar, "test_batch.bin"), "rb") as f:
            records = f.read()
        with open(self.path("cifar_shards", "val", "manifest.json")) as f:
            self.assertEqual(json.load(f)["classes"], names)
        checked = 0
        for shard in sorted(os.listdir(self.path("cifar_shards", "val"))):
            if not shard.endswith(".tar"):
                continue
            with tarfile.open(self.path("cifar_shards", "val", shard)) as tar:
                for member in tar:
                    if member.name.endswith(".png"):
                        k = int(member.name.split(".")[0])  # validation keeps the files' order
                        record = records[k * 3073:(k + 1) * 3073]
                        label = int(tar.extractfile(member.name.replace(".png", ".cls")).read())
                        pixels = Image.open(io.BytesIO(tar.extractfile(member).read())).convert("RGB").tobytes()
                        planes = [record[1 + c * 1024:1 + (c + 1) * 1024] for c in range(3)]
                        expected = bytes(planes[c][i] for i in range(1024) for c in range(3))
                        self.assertEqual(label, record[0], member.name)
                        self.assertEqual(pixels, expected, member.name)
                        checked += 1
        self.assertEqual(checked, 20)

    def test_shards_of_tar_and_tarfile_train_without_index_or_manifest(self):
        root = self.path("foreign")
        for split in ("train", "val"):
            members = self.path("members_" + split)
            os.makedirs(members)
            classes = sorted(os.listdir(os.path.join(self.folder, split)))
            samples = [(c, os.path.join(self.folder, split, c, name), label) for label, c in enumerate(classes)
                       for name in sorted(os.listdir(os.path.join(self.folder, split, c)))]
            for k, (_, image, label) in enumerate(samples):
                shutil.copy(image, os.path.join(members, f"s{k:05d}.jpg"))
                with open(os.path.join(members, f"s{k:05d}.cls"), "w") as f:
                    f.write(str(label))
            os.makedirs(os.path.join(root, split))
            names = sorted(os.listdir(members))
            half = len(names) // 2
            # One shard by GNU tar, one by Python's tarfile in pax format.
            subprocess.run(["tar", "--format=gnu", "-cf", os.path.join(root, split, f"{split}-0.tar"), "-C", members,
                            *names[:half]], check=True, timeout=60)
            with tarfile.open(os.path.join(root, split, f"{split}-1.tar"), "w", format=tarfile.PAX_FORMAT) as t:
                for name in names[half:]:
                    t.add(os.path.join(members, name), arcname=name)
        code, out, err = run(launch(root, *RUN, "--epochs", "1"), timeout=240)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(last_json(out)["val"]["count"], 40)

    def test_damaged_shards_are_named_before_training(self):
        self.make_shards(self.path("damaged"), "--seed", "1")
        shard = self.path("damaged", "train", "train-000001.tar")
        with open(shard, "r+b") as f:
            f.truncate(os.path.getsize(shard) - 700)
        code, out, err = run(launch(self.path("damaged"), *RUN, "--epochs", "1"), timeout=120)
        self.assertNotEqual(code, 0)
        self.assertIn(f"shard {shard} has", err)
        self.assertIn("and the manifest says", err)
        self.assertNotIn("Epoch: [0]", out)
        # Without the manifest and the index, the scan finds where the tar was cut.
        os.remove(self.path("damaged", "train", "manifest.json"))
        os.remove(shard[:-4] + ".idx")
        code, out, err = run(launch(self.path("damaged"), *RUN, "--epochs", "1"), timeout=120)
        self.assertNotEqual(code, 0)
        self.assertIn(f"shard {shard} is truncated", err)


class MaxSide(unittest.TestCase):
    """`make-shards --max-side N`: an image longer than N on a side is PIL's bilinear resize of it
    to fit (torchvision's Resize), stored as a JPEG; an image that fits keeps its bytes."""

    def test_larger_images_are_resized_as_pil_resizes_them_the_others_kept(self):
        import numpy
        from PIL import Image
        tmp = tempfile.TemporaryDirectory(prefix="dpt_max_side_")
        self.addCleanup(tmp.cleanup)
        folder, out = os.path.join(tmp.name, "folder"), os.path.join(tmp.name, "shards")
        rng = numpy.random.default_rng(5)
        sources = {}  # path -> (width, height) of the image written there, in the ImageFolder's order
        for relative, (width, height) in (("a/small.jpg", (50, 40)), ("a/wide.jpg", (120, 90)),
                                          ("b/square.jpg", (64, 64)), ("b/tall.png", (70, 130))):
            path = os.path.join(folder, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # Smooth gradients under noise: detail for the filter to weigh, as in a photograph.
            y, x = numpy.mgrid[0:height, 0:width]
            base = numpy.stack([x * 255 / width, y * 255 / height, (x + y) * 127 / (width + height)], axis=-1)
            pixels = numpy.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(numpy.uint8)
            Image.fromarray(pixels).save(path, quality=92)
            sources[path] = (width, height)
        # At quality 100 (every quantizer 1) the stored JPEG decodes to exactly what PIL's own JPEG
        # of the same pixels decodes to, so the resize itself is checked pixel for pixel. (Below
        # 100, libjpeg-turbo's TurboJPEG API and PIL's encoder quantize a few coefficients apart.)
        code, stdout, err = run([dptrain(), "make-shards", folder, out, "--max-side", "64", "--jpeg-quality", "100",
                                 "--order", "folder"], timeout=60)
        self.assertEqual(code, 0, stdout + err)
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual((manifest["max_side"], manifest["jpeg_quality"]), (64, 100))
        members = {}
        for shard in manifest["shards"]:
            with tarfile.open(os.path.join(out, shard["file"])) as tar:
                members.update({m.name: tar.extractfile(m).read() for m in tar})
        for k, (path, (width, height)) in enumerate(sources.items()):
            with open(path, "rb") as f:
                source = f.read()
            key = f"{k:09d}"
            if max(width, height) <= 64:
                self.assertEqual(members[f"{key}.{path[-3:]}"], source, path)
                continue
            stored = Image.open(io.BytesIO(members[f"{key}.jpg"]))
            size = tuple(max(1, int(side * 64 / max(width, height) + 0.5)) for side in (width, height))
            self.assertEqual((stored.format, stored.size), ("JPEG", size), path)
            # PIL's resize, encoded by PIL at the same quality and chroma subsampling.
            resized = Image.open(path).convert("RGB").resize(size, Image.BILINEAR)
            expected = io.BytesIO()
            resized.save(expected, format="JPEG", quality=100, subsampling=2)
            expected = numpy.asarray(Image.open(expected).convert("RGB"), dtype=numpy.int16)
            self.assertEqual(numpy.abs(numpy.asarray(stored.convert("RGB"), dtype=numpy.int16) - expected).max(), 0, path)
            # The check can fail: another filter's resize is not the image stored.
            nearest = numpy.asarray(Image.open(path).convert("RGB").resize(size, Image.NEAREST), dtype=numpy.int16)
            self.assertGreater(numpy.abs(nearest - expected).mean(), 5, path)


if __name__ == "__main__":
    unittest.main()

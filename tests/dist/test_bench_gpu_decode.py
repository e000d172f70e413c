"""bench/gpu_decode, which measures on a lent GPU machine: its transform (crop, resize, flip,
normalize) gives the values and the flips torchvision's recipe does, its JSON counts what it ran,
and without a GPU it says so and exits 2. Run here on the CPU (--device cpu), the same code."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

from bench_script import BENCH, load_bench_script

SCRIPT = os.path.join(BENCH, "gpu_decode")


class Transform(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.bench = load_bench_script("gpu_decode")
        cls.mean = torch.tensor(cls.bench.MEAN).view(1, 3, 1, 1)
        cls.std = torch.tensor(cls.bench.STD).view(1, 3, 1, 1)

    def test_a_uniform_image_normalizes_to_its_colour(self):
        colour = torch.tensor([200, 100, 30], dtype=torch.uint8)
        image = colour.view(3, 1, 1).expand(3, 375, 500).contiguous()
        batch = self.bench.transform([image, image[:, :300, :200].contiguous()], self.mean, self.std)
        self.assertEqual(batch.shape, (2, 3, 224, 224))
        self.assertEqual(batch.dtype, torch.float32)
        expected = (colour.float() / 255 - self.mean.view(3)) / self.std.view(3)
        for c in range(3):
            self.assertLess((batch[:, c] - expected[c]).abs().max().item(), 1e-5)
        # Scaled to [0, 1] but not normalized, or normalized with another channel's statistics, lands outside.
        self.assertGreater(abs(colour[0].item() / 255 - expected[0].item()), 1e-2)
        self.assertGreater(abs((colour[0].item() / 255 - self.bench.MEAN[1]) / self.bench.STD[1] - expected[0].item()),
                           1e-2)

    def test_about_half_the_images_are_flipped(self):
        # Brightness rising to the right: a crop of it still rises, unless it was flipped.
        ramp = torch.arange(500, dtype=torch.float32).div(499).mul(255).round().to(torch.uint8)
        image = ramp.view(1, 1, 500).expand(3, 375, 500).contiguous()
        torch.manual_seed(0)
        batch = self.bench.transform([image] * 200, self.mean, self.std)
        rising = (batch[:, 0, 112, -1] > batch[:, 0, 112, 0]).sum().item()
        falling = (batch[:, 0, 112, -1] < batch[:, 0, 112, 0]).sum().item()
        self.assertEqual(rising + falling, 200)
        self.assertTrue(70 <= falling <= 130, f"{falling} of 200 flipped")


class Libraries(unittest.TestCase):
    def test_names_the_jpeg_library_this_process_loaded(self):
        # torchvision's image extension brings libjpeg in (as a GPU's decode brings libnvjpeg).
        bench = load_bench_script("gpu_decode")
        self.assertTrue(any(os.path.basename(path).startswith("libjpeg") for path in bench.loaded_libraries("jpeg")),
                        bench.loaded_libraries("jpeg"))
        self.assertEqual(bench.loaded_libraries("no-such-library"), [])


class Run(unittest.TestCase):
    def run_bench(self, *args):
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120, env=env)

    def test_reports_what_it_ran(self):
        with tempfile.TemporaryDirectory(prefix="dpt_gpu_decode_") as root:
            done = self.run_bench("--device", "cpu", "--images", "20", "--batch", "8", "--repeats", "2",
                                  "--dir", root)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            report = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertEqual((report["device"], report["images"], report["batch"], report["repeats"]), ("cpu", 20, 8, 2))
        self.assertEqual(report["batched_decode"], load_bench_script("gpu_decode").BATCHED_DECODE)
        for rate in ("decode_img_s", "decode_img_per_cpu_s", "pipeline_img_s", "pipeline_img_per_cpu_s",
                     "pipeline_gpu_ms_per_batch"):
            self.assertGreater(report[rate], 0, rate)
        self.assertEqual(report["nvjpeg_library"], [])  # no GPU decode on the CPU
        self.assertIsInstance(report["nvjpeg_headers"], list)

    @unittest.skipIf(torch.cuda.is_available(), "this machine has a GPU")
    def test_without_a_gpu_it_says_so_and_exits_2(self):
        done = self.run_bench("--images", "20", "--dir", "/nonexistent/never-made")
        self.assertEqual(done.returncode, 2, done.stdout + done.stderr)
        self.assertIn("no CUDA GPU here", done.stdout)


if __name__ == "__main__":
    unittest.main()

"""Model FLOP/s and MFU in `dptrain train`'s logs. `dptrain bench-peak` writes a rate per precision;
a 2-rank run given a peak file logs, in metrics.jsonl, model FLOP/s = images/s x 2 x 3 x the forward
multiply-adds (counted here independently, with forward hooks on torchvision's ResNet-18) and
MFU = that over the peak of every thread of every rank; a peak file of another machine is ignored.
The banner says what --amp does on this CPU: a hint to use it where bf16 matrix units exist, a
warning against it where LibTorch would emulate bf16; and under --mode dp, whose replicas are
threads, to start with OpenMP's threads asleep."""

import json
import os
import shutil
import tempfile
import unittest

import torch
import torchvision

from proc import dptrain, run
from train_runs import alone

RUN = ["--dummy", "-a", "resnet18", "--image-size", "32", "--dummy-train-size", "64", "--dummy-val-size", "16",
       "-b", "16", "-j", "1", "--epochs", "1", "-p", "1", "--seed", "1"]
PEAK = 2.5e10  # FLOP/s per thread written into the test's peak file


def forward_multiply_adds(model, size):
    """Convolutions' and linear layers' multiply-adds of one forward of one image."""
    total = 0

    def conv(module, inputs, output):
        nonlocal total
        kernel = module.weight.shape[1] * module.weight.shape[2] * module.weight.shape[3]
        total += output.numel() * kernel

    def linear(module, inputs, output):
        nonlocal total
        total += output.numel() * module.in_features

    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(conv)
        elif isinstance(module, torch.nn.Linear):
            module.register_forward_hook(linear)
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size))
    return total


class Mfu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dpt-mfu-")
        cls.measured = os.path.join(cls.dir, "measured.json")
        # Without bf16 units LibTorch 2.6 emulates bf16 products at about 1 GFLOP/s (0.8 measured on
        # an AVX2 CPU): bench-peak then measures smaller kernels (174 s there when it did not).
        code, out, err = run([dptrain(), "bench-peak", "--output", cls.measured, "--seconds", "0.02"], timeout=480)
        assert code == 0, out + err
        with open(cls.measured) as f:
            cls.peak = json.load(f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def train(self, name, peak_file):
        out_dir = os.path.join(self.dir, name)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                              *RUN, "--output", out_dir, "--peak-file", peak_file], timeout=240, env=env)
        self.assertEqual(code, 0, out + err)
        with open(os.path.join(out_dir, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f], out

    def write_peak(self, name, cpu):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            json.dump(dict(self.peak, cpu=cpu, precisions={"fp32": {"peak": PEAK}}), f)
        return path

    def test_bench_peak_measures_every_precision_of_the_cpu(self):
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
        self.assertEqual(self.peak["cpu"], model)
        self.assertEqual(self.peak["device"], "cpu")
        self.assertEqual(sorted(self.peak["precisions"]), ["bf16", "fp32"])
        for precision, rates in self.peak["precisions"].items():
            # A core does far less than 10 TFLOP/s per thread, and more than 0.1 GFLOP/s even in bf16
            # emulated without bf16 units (LibTorch 2.6's bf16 products: 0.8-0.9 GFLOP/s on an AVX2
            # CPU; a rate counted in GFLOP instead of FLOP would be under 100).
            for kernel in ("matmul", "conv"):
                self.assertTrue(1e8 < rates[kernel] < 1e13, (precision, rates))
            self.assertEqual(rates["peak"], max(rates["matmul"], rates["conv"]))

    def test_the_logs_give_model_flops_and_their_fraction_of_the_peak(self):
        records, out = self.train("counted", self.write_peak("peak.json", self.peak["cpu"]))
        macs = forward_multiply_adds(torchvision.models.resnet18(num_classes=10), 32)
        passes = [r for r in records if r["phase"] in ("train_step", "train")]
        self.assertEqual(len(passes), 3)  # 2 steps and the pass
        for r in passes:
            # 2 FLOPs per multiply-add, 3 passes over the weights per training image: 6 x, not the
            # forward's 2 x or 4 x, which a relative 1e-9 cannot take for it.
            self.assertAlmostEqual(r["model_flop_per_s"] / r["img_per_s"] / (6 * macs), 1.0, delta=1e-9)
            self.assertAlmostEqual(r["mfu"], r["model_flop_per_s"] / (PEAK * 2 * 1), delta=1e-12)
        self.assertTrue(all(r["model_flop_per_s"] is None for r in records if r["phase"] == "val"))
        self.assertIn("MFU", out)
        self.assertIn(f"compute: {macs / 1e9:.3g} G multiply-adds per image forward at 32 px", out)

    def test_a_peak_file_of_another_machine_is_ignored(self):
        records, out = self.train("elsewhere", self.write_peak("other.json", "another CPU"))
        train = [r for r in records if r["phase"] == "train"][0]
        self.assertGreater(train["model_flop_per_s"], 0)
        self.assertIsNone(train["mfu"])
        self.assertIn("dptrain bench-peak", out)

    def test_the_banner_says_whether_amp_pays_on_this_cpu(self):
        with open("/proc/cpuinfo") as f:
            flags = next(line.split(":", 1)[1].split() for line in f if line.startswith("flags"))
        bf16_units = "avx512_bf16" in flags or "amx_bf16" in flags
        hint, warning = "hint: this CPU has bf16 matrix units", "warning: --amp trains in bf16, but this CPU has no"
        for amp in ([], ["--amp"]):
            with self.subTest(amp=amp):
                code, out, err = run([dptrain(), "train", *RUN, "--max-steps", "1", *amp], timeout=120,
                                     env=dict(alone(), OMP_NUM_THREADS="1"))
                self.assertEqual(code, 0, out + err)
                self.assertEqual(hint in out, bf16_units and not amp, out)
                self.assertEqual(warning in out, not bf16_units and bool(amp), out)

    def test_the_banner_says_when_dp_replicas_share_cores_with_spinning_threads(self):
        hint = "hint: --mode dp runs its replicas as threads beside LibTorch's OpenMP threads"
        spinning = {k: v for k, v in alone().items() if k != "OMP_WAIT_POLICY"}
        for policy, replicas, shown in (
                (None, "2", True), ("active", "2", True), ("PASSIVE", "2", False), (None, "1", False)):
            with self.subTest(policy=policy, replicas=replicas):
                env = dict(spinning, OMP_NUM_THREADS="1", **({"OMP_WAIT_POLICY": policy} if policy else {}))
                code, out, err = run([dptrain(), "train", *RUN, "--max-steps", "1", "--mode", "dp",
                                      "--replicas", replicas], timeout=120, env=env)
                self.assertEqual(code, 0, out + err)
                self.assertEqual(hint in out, shown, out)


if __name__ == "__main__":
    unittest.main()

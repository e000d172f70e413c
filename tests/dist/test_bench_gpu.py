"""bench/gpu's bookkeeping, which runs first on a lent GPU machine and cannot run here: dptrain and
the tuned Python alternate over --rounds (each first in turn), each side keeps its best round, the
ratios and the phase and launch times are of those bests, the untuned Python runs once, and the
operations whose counts differ between the sides are listed. The GPU programs are stood in for by
functions that hand out known rates, timings and counts, so every figure of the JSON is checked
against its arithmetic."""

import contextlib
import io
import json
import sys
import types
import unittest
from unittest import mock

from bench_script import load_bench_script


def timings(rate):
    """A run's launch and phase times, told apart by its rate: the summary's must be its best run's."""
    # In the order of dptrain's JSON (by name), which the printed line does not follow.
    return {"launch_ms": rate / 100, "phase_ms": {"backward": rate / 5, "forward": rate / 10, "update": rate / 50}}


class FakeGpu:
    """Hands each run the next of `rates` (images/s), with timings(rate) and its side's operation
    counts, and records who ran, in order."""

    MULTIPLY_ADDS = 4.0e9
    PEAK = 1.0e15
    OURS = {"aten::convolution": 53, "aten::add_": 16, "aten::_foreach_mul_": 2}
    THEIRS = {"aten::convolution": 53, "aten::add_": 16, "aten::_fused_sgd_": 1}

    def __init__(self, bench, rates):
        self.bench, self.rates, self.calls, self.counted = bench, iter(rates), [], []

    def python(self, code, *args):
        if code is self.bench.PEAK:
            return {"gpu": "fake", "fp16_matmul_flop_per_s": self.PEAK, "torch": "0"}
        tuned, count_ops = args[-2] == 1, args[-1] == 1  # the peer's last two arguments
        name = "python_tuned" if tuned else "python"
        self.calls.append(name)
        if count_ops:
            self.counted.append(name)
        rate = next(self.rates)
        return {"ms_per_step": 1.0, "img_per_s": rate, "fused_sgd": tuned, **timings(rate),
                "ops": self.THEIRS if count_ops else {}}

    def run(self, command, **_):
        self.calls.append("dptrain")
        count_ops = "--op-counts" in command
        if count_ops:
            self.counted.append("dptrain")
        ops = self.OURS if count_ops else {}
        rate = next(self.rates)
        line = json.dumps({"ms_per_step": 1.0, "img_per_s": rate, **timings(rate),
                           "forward_multiply_adds": self.MULTIPLY_ADDS, "ops": ops})
        return types.SimpleNamespace(returncode=0, stdout=line + "\n", stderr="")


def run_bench(args, rates, gpu=True):
    """bench/gpu's exit code, its JSON line and the stand-in (who ran, in order; who counted)."""
    bench = load_bench_script("gpu")
    fake = FakeGpu(bench, rates)
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: gpu))
    out = io.StringIO()
    with mock.patch.dict(sys.modules, {"torch": torch}), mock.patch.object(bench, "python", fake.python), \
            mock.patch.object(bench.subprocess, "run", fake.run), mock.patch.object(bench, "dptrain", lambda: "x"), \
            mock.patch.object(sys, "argv", ["bench/gpu", *args]), contextlib.redirect_stdout(out):
        code = bench.main()
    lines = out.getvalue().strip().splitlines()
    fake.printed = lines
    return code, json.loads(lines[-1]) if lines[-1].startswith("{") else None, fake


class BenchGpuRounds(unittest.TestCase):
    def test_sides_alternate_and_keep_their_best_round(self):
        # Round 1: dptrain 100, tuned 130; round 2 (tuned first): tuned 110, dptrain 120; round 3:
        # dptrain 90, tuned 100; then the untuned Python 80.
        code, summary, fake = run_bench(["--rounds", "3"], [100, 130, 110, 120, 90, 100, 80])
        self.assertEqual(code, 0)
        self.assertEqual(fake.calls, ["dptrain", "python_tuned", "python_tuned", "dptrain", "dptrain",
                                      "python_tuned", "python"])
        # Only the first round counts operations, the same every round.
        self.assertEqual(fake.counted, ["dptrain", "python_tuned"])
        self.assertEqual(summary["dptrain_first_in_round"], [True, False, True])
        self.assertEqual(summary["dptrain_img_per_s"], 120)
        self.assertEqual(summary["python_tuned_img_per_s"], 130)
        self.assertEqual(summary["python_img_per_s"], 80)
        self.assertAlmostEqual(summary["ratio"], 120 / 130)
        self.assertAlmostEqual(summary["ratio_untuned"], 120 / 80)
        for got, want in zip(summary["ratio_by_round"], [100 / 130, 120 / 110, 90 / 100]):
            self.assertAlmostEqual(got, want)
        flop_per_image = 6 * FakeGpu.MULTIPLY_ADDS
        self.assertAlmostEqual(summary["dptrain_fraction_of_peak"], 120 * flop_per_image / FakeGpu.PEAK)
        # The operations only one side ran, with both counts; those both ran as often are left out.
        self.assertEqual(summary["op_differences"], {"aten::_foreach_mul_": [2, 0], "aten::_fused_sgd_": [0, 1]})
        # Each side's launch and phase times are those of its best round (the untuned: its one run).
        for name, rate in [("dptrain", 120), ("python_tuned", 130), ("python", 80)]:
            self.assertEqual(summary[f"{name}_launch_ms"], timings(rate)["launch_ms"], name)
            self.assertEqual(summary[f"{name}_phase_ms"], timings(rate)["phase_ms"], name)
        self.assertIn("device ms per phase (dptrain/tuned Python): forward 12.00/13.00, backward 24.00/26.00, "
                      "update 2.40/2.60; host launch 1.2/1.3 ms of a 1.0/1.0 ms step", fake.printed)

    def test_one_round_runs_each_side_once(self):
        code, summary, fake = run_bench(["--rounds", "1"], [100, 125, 90])
        self.assertEqual(code, 0)
        self.assertEqual(fake.calls, ["dptrain", "python_tuned", "python"])
        self.assertAlmostEqual(summary["ratio"], 100 / 125)
        self.assertEqual(len(summary["ratio_by_round"]), 1)

    def test_no_round_is_refused(self):
        with self.assertRaises(SystemExit) as refused, contextlib.redirect_stderr(io.StringIO()):
            run_bench(["--rounds", "0"], [])
        self.assertEqual(refused.exception.code, 2)

    def test_without_a_gpu_it_exits_2_having_run_nothing(self):
        code, summary, fake = run_bench([], [], gpu=False)
        self.assertEqual((code, summary, fake.calls), (2, None, []))


if __name__ == "__main__":
    unittest.main()

"""`dptrain train --zero 1|2`: each rank keeps and steps the optimizer state of its shard only
(ZeroRedundancyOptimizer), and under --zero 2 also only its part of the reduced gradients (each
bucket reduce-scattered, ZeroStage2Optimizer), yet trains the same weights as plain DDP, bit for
bit (the same averaged gradients, each element's update the same arithmetic), with the recipes of
the trainer around it; only clipping under --zero 2 sums the norm in another order. Checkpoints
hold the whole optimizer in the ordinary layout, so a sharded run resumes without ZeRO, a plain
run resumes under it, at another world size too, and Python loads the state into torch.optim."""

import os
import tempfile
import unittest

from proc import PYTHON, dptrain, run
from train_runs import compare_checkpoints, identical

# ResNet-20 on 16 px synthetic images: 96 training images, batch 8 per rank: 6 steps an epoch on 2
# ranks, 4 on 3.
SMALL = ["--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "96", "--dummy-val-size", "33",
         "-b", "8", "-j", "1", "--seed", "3", "--deterministic", "--epochs", "3", "-p", "100"]
# torchvision's recipe shape: AdamW over three weight-decay groups, clipping (the global norm over
# every gradient), label smoothing and a model EMA.
ADAMW = ["--opt", "adamw", "--lr", "0.002", "--wd", "0.05", "--norm-weight-decay", "0", "--bias-weight-decay", "0",
         "--clip-grad-norm", "1", "--label-smoothing", "0.1", "--model-ema", "--model-ema-steps", "3"]
# SGD with momentum (dptrain's fused update) over gradient accumulation and SyncBatchNorm.
SGD = ["--lr", "0.2", "--accum-steps", "2", "--sync-bn"]
# The AdamW recipe without clipping: bitwise under --zero 2 too.
ADAMW_UNCLIPPED = [flag for flag in ADAMW if flag not in ("--clip-grad-norm", "1")]
# Mixed precision (bf16 autocast on the CPU) with channels_last weights, which the ZeRO gathers
# move as flat memory.
AMP = ADAMW_UNCLIPPED + ["--amp", "--channels-last"]

# Python's torch.optim class takes the consolidated state and steps on from it.
LOADS_IN_PYTHON = r"""
import sys, torch
state = torch.load(sys.argv[1])["optimizer"]
params = [torch.nn.Parameter(torch.zeros(s["exp_avg"].shape)) for _, s in sorted(state["state"].items())]
groups = [dict(g, params=[params[i] for i in g["params"]]) for g in state["param_groups"]]
optimizer = torch.optim.AdamW([{"params": g["params"]} for g in groups], lr=0.1)
optimizer.load_state_dict(state)
for p in params:
    p.grad = torch.ones_like(p)
optimizer.step()
print(len(params), sum(p.numel() for p in params), [g["weight_decay"] for g in optimizer.param_groups])
"""


def launch(nproc, *args):
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", str(nproc), "--", dptrain(), "train", *args]


class ZeroTraining(unittest.TestCase):
    def train(self, nproc, *args):
        code, out, err = run(launch(nproc, *SMALL, *args), timeout=240)
        self.assertEqual(code, 0, out + err)
        return out

    def test_equals_ddp_bitwise(self):
        """Weights and the whole optimizer state after 8 steps: stage 1 on 2 ranks with the AdamW
        recipe, stages 1 and 2 on 2 and 3 ranks with SGD over accumulation and SyncBatchNorm, stage
        2 on 2 ranks with AdamW unclipped, and both stages with bf16 autocast and channels_last."""
        for nproc, recipe, stages in ((2, ADAMW, ("1",)), (2, SGD, ("1", "2")), (3, SGD, ("1", "2")),
                                      (2, ADAMW_UNCLIPPED, ("2",)), (2, AMP, ("1", "2"))):
            with self.subTest(nproc=nproc, recipe=" ".join(recipe)), \
                    tempfile.TemporaryDirectory(prefix="dpt_zero_") as tmp:
                plain = os.path.join(tmp, "plain")
                self.train(nproc, *recipe, "--max-steps", "8", "--output", plain)
                for stage in stages:
                    zero = os.path.join(tmp, "zero" + stage)
                    out = self.train(nproc, *recipe, "--zero", stage, "--max-steps", "8", "--output", zero)
                    kept = "state and reduced gradients" if stage == "2" else "state"
                    self.assertRegex(out, rf"ZeRO-{stage}: each process keeps its shard's {kept}, rank 0 that of "
                                          r"\d+ of 269722 weights")
                    comparison = compare_checkpoints(os.path.join(plain, "checkpoint.pt"),
                                                     os.path.join(zero, "checkpoint.pt"))
                    self.assertEqual(comparison, identical(comparison.positions), f"--zero {stage}")

    def test_zero2_clips_the_global_norm(self):
        """--zero 2 clips by the norm of the whole gradient, summed over the ranks' parts: the
        weights stay within 1e-4 of DDP's after 8 clipped AdamW steps (summation order only),
        while clipping each rank's parts by their own norm lands farther than that."""
        with tempfile.TemporaryDirectory(prefix="dpt_zero_clip_") as tmp:
            runs = {}
            for name, flags in (("plain", ["--clip-grad-norm", "1"]), ("zero2", ["--clip-grad-norm", "1", "--zero", "2"]),
                                ("unclipped", [])):
                runs[name] = os.path.join(tmp, name)
                self.train(2, *ADAMW_UNCLIPPED, *flags, "--max-steps", "8", "--output", runs[name])
            close = compare_checkpoints(os.path.join(runs["plain"], "checkpoint.pt"),
                                        os.path.join(runs["zero2"], "checkpoint.pt")).max_abs_diff
            self.assertLessEqual(close, 1e-4)
            # The bound rejects an answer that clipped otherwise: not clipping at all differs by more.
            far = compare_checkpoints(os.path.join(runs["plain"], "checkpoint.pt"),
                                      os.path.join(runs["unclipped"], "checkpoint.pt")).max_abs_diff
            self.assertGreater(far, 1e-4)

    def test_checkpoints_are_whole(self):
        """4 steps, a stop, 4 more from the checkpoint: sharded then plain, and plain then sharded,
        at stages 1 and 2, end bitwise where 8 plain steps end; Python's AdamW loads and steps the
        state that sharded runs wrote, and a stage 2 checkpoint resumes at 3 ranks under either
        stage."""
        with tempfile.TemporaryDirectory(prefix="dpt_zero_resume_") as tmp:
            straight = os.path.join(tmp, "straight")
            self.train(2, *ADAMW_UNCLIPPED, "--max-steps", "8", "--output", straight)
            for name, first, second in (("zero_then_plain", ["--zero", "1"], []),
                                        ("plain_then_zero", [], ["--zero", "1"]),
                                        ("zero2_then_plain", ["--zero", "2"], []),
                                        ("plain_then_zero2", [], ["--zero", "2"])):
                with self.subTest(name):
                    halves = os.path.join(tmp, name)
                    self.train(2, *ADAMW_UNCLIPPED, *first, "--max-steps", "4", "--output", halves)
                    out = self.train(2, *ADAMW_UNCLIPPED, *second, "--max-steps", "8", "--output", halves,
                                     "--resume", os.path.join(halves, "checkpoint.pt"))
                    self.assertIn('"global_step":8', out)
                    self.assertEqual(compare_checkpoints(os.path.join(straight, "checkpoint.pt"),
                                                         os.path.join(halves, "checkpoint.pt")),
                                     identical("8 1 2 8 1 2"))
            # Written under --zero 1 and --zero 2 (the runs that resumed under them).
            for name in ("plain_then_zero", "plain_then_zero2"):
                code, out, err = run([PYTHON, "-c", LOADS_IN_PYTHON, os.path.join(tmp, name, "checkpoint.pt")],
                                     timeout=120)
                self.assertEqual(code, 0, err)
                self.assertEqual(out.strip(), "59 269722 [0.05, 0.0, 0.0]", name)
            sharded = os.path.join(tmp, "plain_then_zero2", "checkpoint.pt")
            wider = os.path.join(tmp, "wider")
            for stage in ("1", "2"):
                out = self.train(3, *ADAMW, "--zero", stage, "--max-steps", "10", "--output", wider + stage,
                                 "--resume", sharded)
                self.assertIn("resuming from " + sharded, out)
                self.assertIn('"global_step":10', out)

    def test_refuses_what_it_cannot_run(self):
        for flags, message in ((["--zero", "1", "--mode", "hvd"], "--zero needs --mode ddp"),
                               (["--zero", "3"], "--zero takes 0 (off), 1 (optimizer state sharded) or 2 (and the "
                                                 "reduced gradients), got 3"),
                               (["--zero", "2", "--find-unused-parameters"],
                                "sharded gradients (ZeRO-2) cannot find unused parameters")):
            with self.subTest(flags=" ".join(flags)):
                code, out, err = run([dptrain(), "train", *SMALL, *flags, "--max-steps", "1"], timeout=60)
                self.assertEqual(code, 2, out + err)
                self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()

"""`dptrain train --zero 1`: each rank keeps and steps the optimizer state of its shard only
(ZeroRedundancyOptimizer), yet trains the same weights as plain DDP, bit for bit (the gradients are
reduced as before and each parameter's update is the same arithmetic), with the recipes of the
trainer around it; its checkpoints hold the whole optimizer in the ordinary layout, so a sharded
run resumes without ZeRO, a plain run resumes under it, at another world size too, and Python
loads the state into torch.optim."""

import os
import tempfile
import unittest

from proc import PYTHON, dptrain, run
from train_runs import COMPARE

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

    def compare(self, a, b):
        code, out, err = run([PYTHON, "-c", COMPARE, a, b], timeout=120)
        self.assertEqual(code, 0, err)
        return out.splitlines()

    def test_equals_ddp_bitwise(self):
        """Weights and the whole optimizer state after 8 steps, on 2 ranks with the AdamW recipe
        and on 2 and 3 ranks with SGD over accumulation and SyncBatchNorm."""
        for nproc, recipe, entries in ((2, ADAMW, 59), (2, SGD, 59), (3, SGD, 59)):
            with self.subTest(nproc=nproc, recipe=" ".join(recipe)), \
                    tempfile.TemporaryDirectory(prefix="dpt_zero_") as tmp:
                plain, zero = os.path.join(tmp, "plain"), os.path.join(tmp, "zero")
                self.train(nproc, *recipe, "--max-steps", "8", "--output", plain)
                out = self.train(nproc, *recipe, "--zero", "1", "--max-steps", "8", "--output", zero)
                self.assertRegex(out, r"ZeRO-1: each process keeps its shard's state, rank 0 that of \d+ of "
                                      r"269722 weights")
                lines = self.compare(os.path.join(plain, "checkpoint.pt"), os.path.join(zero, "checkpoint.pt"))
                self.assertEqual(lines[1], f"max_abs_diff 0.0 bitwise True optimizer_bitwise True entries {entries}")

    def test_checkpoints_are_whole(self):
        """4 steps, a stop, 4 more from the checkpoint: sharded then plain, and plain then sharded,
        end bitwise where 8 plain steps end; a sharded checkpoint resumes at 3 ranks under ZeRO, and
        Python's AdamW loads and steps its state."""
        with tempfile.TemporaryDirectory(prefix="dpt_zero_resume_") as tmp:
            straight = os.path.join(tmp, "straight")
            self.train(2, *ADAMW, "--max-steps", "8", "--output", straight)
            for name, first, second in (("zero_then_plain", ["--zero", "1"], []),
                                        ("plain_then_zero", [], ["--zero", "1"])):
                with self.subTest(name):
                    halves = os.path.join(tmp, name)
                    self.train(2, *ADAMW, *first, "--max-steps", "4", "--output", halves)
                    out = self.train(2, *ADAMW, *second, "--max-steps", "8", "--output", halves,
                                     "--resume", os.path.join(halves, "checkpoint.pt"))
                    self.assertIn('"global_step":8', out)
                    lines = self.compare(os.path.join(straight, "checkpoint.pt"), os.path.join(halves, "checkpoint.pt"))
                    self.assertEqual(lines, ["8 1 2 8 1 2",
                                             "max_abs_diff 0.0 bitwise True optimizer_bitwise True entries 59"])
            sharded = os.path.join(tmp, "zero_then_plain", "checkpoint.pt")
            code, out, err = run([PYTHON, "-c", LOADS_IN_PYTHON, sharded], timeout=120)
            self.assertEqual(code, 0, err)
            self.assertEqual(out.strip(), "59 269722 [0.05, 0.0, 0.0]")
            wider = os.path.join(tmp, "wider")
            out = self.train(3, *ADAMW, "--zero", "1", "--max-steps", "10", "--output", wider, "--resume", sharded)
            self.assertIn("resuming from " + sharded, out)
            self.assertIn('"global_step":10', out)

    def test_needs_ddp_and_stage_1(self):
        for flags, message in ((["--zero", "1", "--mode", "hvd"], "--zero needs --mode ddp"),
                               (["--zero", "2"], "--zero takes 0 (off) or 1 (optimizer state sharded), got 2")):
            with self.subTest(flags=" ".join(flags)):
                code, out, err = run([dptrain(), "train", *SMALL, *flags, "--max-steps", "1"], timeout=60)
                self.assertEqual(code, 2, out + err)
                self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()

"""`dptrain train` checkpoints: N optimizer steps straight end with the same weights and optimizer
state, bit for bit, as N/2 steps, a stop (--max-steps, mid-epoch), --resume and N/2 more, on 2
processes under --deterministic (SGD, and AdamW with weight-decay groups, clipping, label
smoothing and batch mixing); epoch checkpoints rotate (keep last K) beside model_best.pt; a run killed at any
moment leaves a checkpoint.pt that loads."""

import json
import os
import signal
import tempfile
import time
import unittest

from proc import PYTHON, Started, dptrain, run
from train_runs import alone, compare_checkpoints, identical

# ResNet-20 on 16 px synthetic images: 96 training images over 2 ranks, batch 8 per rank, so 6
# steps per epoch; 8 steps end 2 steps into epoch 2 and the half-way stop is mid-epoch 1.
SMALL = ["--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "96", "--dummy-val-size", "33",
         "-b", "8", "-j", "1", "--lr", "0.2", "--seed", "3", "--deterministic", "--epochs", "3", "-p", "100"]



# The optimizer class a checkpoint's state is for, from the keys only it has, and each group's
# decay; then whether two checkpoints' model EMAs (absent: None) are bitwise equal, and the first
# one's update count.
OPTIMIZER = r"""
import sys, torch
a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])
groups = a["optimizer"]["param_groups"]
kind = "AdamW" if "betas" in groups[0] else "RMSprop" if "alpha" in groups[0] else "SGD"
print(kind, [g["weight_decay"] for g in groups])
ema_a, ema_b = a.get("model_ema"), b.get("model_ema")
same = None if ema_a is None else list(ema_a) == list(ema_b) and all(torch.equal(v, ema_b[k]) for k, v in ema_a.items())
print("ema_bitwise", same, "n_averaged", None if ema_a is None else int(ema_a["n_averaged"]))
"""


def launch(*args):
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train", *args]


class ExactResume(unittest.TestCase):
    def test_stop_and_resume_equals_straight_run_bitwise(self):
        """With SGD, and with a recipe of torchvision's: AdamW over three weight-decay groups with
        clipping (its moment estimates and step counts resume too), label smoothing and mixup or
        cutmix per batch (their draws resume too), and a model EMA updated every 3 steps."""
        for recipe in ([], ["--opt", "adamw", "--lr", "0.002", "--wd", "0.05", "--norm-weight-decay", "0",
                            "--bias-weight-decay", "0", "--clip-grad-norm", "1", "--label-smoothing", "0.1",
                            "--mixup-alpha", "0.2", "--cutmix-alpha", "1.0", "--model-ema", "--model-ema-steps",
                            "3"]):
            with self.subTest(recipe=" ".join(recipe)), tempfile.TemporaryDirectory(prefix="dpt_resume_") as tmp:
                straight, halves = os.path.join(tmp, "straight"), os.path.join(tmp, "halves")
                code, out, err = run(launch(*SMALL, *recipe, "--max-steps", "8", "--output", straight), timeout=240)
                self.assertEqual(code, 0, out + err)
                code, out, err = run(launch(*SMALL, *recipe, "--max-steps", "4", "--output", halves), timeout=240)
                self.assertEqual(code, 0, out + err)
                self.assertIn('"global_step":4', out)
                code, out, err = run(launch(*SMALL, *recipe, "--max-steps", "8", "--output", halves,
                                            "--resume", os.path.join(halves, "checkpoint.pt")), timeout=240)
                self.assertEqual(code, 0, out + err)
                self.assertIn('"global_step":8', out)
                self.assertEqual(compare_checkpoints(os.path.join(straight, "checkpoint.pt"),
                                                     os.path.join(halves, "checkpoint.pt")),
                                 identical("8 1 2 8 1 2"))  # global step, epoch, step in epoch
                code, out, err = run([PYTHON, "-c", OPTIMIZER, os.path.join(halves, "checkpoint.pt"),
                                      os.path.join(straight, "checkpoint.pt")], timeout=120)
                self.assertEqual(code, 0, err)
                # 8 steps: 6 of epoch 0 (updates after steps 0 and 3), 2 of epoch 1 (after step 0).
                self.assertEqual(out.splitlines(), ["SGD [0.0001]", "ema_bitwise None n_averaged None"] if not recipe
                                 else ["AdamW [0.05, 0.0, 0.0]", "ema_bitwise True n_averaged 3"])


# The PowerSGD state a checkpoint holds: its step count and every rank's error keys.
POWERSGD_STATE = r"""
import sys, torch
hook = torch.load(sys.argv[1])["comm_hook"]
print("iteration", int(hook["iteration"]), "errors", sorted(k for k in hook if k.startswith("error.")))
"""


class PowerSGDTraining(unittest.TestCase):
    def test_stop_and_resume_with_powersgd_equals_straight_run_bitwise(self):
        """--comm-hook powersgd on 2 processes: compression from step 2, so the half-way checkpoint
        carries P, Q, the seeds' position and both ranks' errors, and the resumed run ends bit for
        bit where the straight one does. (Without that state the resumed run would all-reduce
        plainly for 2 steps and draw a new Q: unit/parallel/powersgd_test.cpp shows such resumes
        differ.)"""
        powersgd = ["--comm-hook", "powersgd", "--powersgd-rank", "2", "--powersgd-start-iter", "2"]
        with tempfile.TemporaryDirectory(prefix="dpt_resume_") as tmp:
            straight, halves = os.path.join(tmp, "straight"), os.path.join(tmp, "halves")
            for out_dir, steps in ((straight, "8"), (halves, "4")):
                code, out, err = run(launch(*SMALL, *powersgd, "--max-steps", steps, "--output", out_dir), timeout=240)
                self.assertEqual(code, 0, out + err)
            code, out, err = run([PYTHON, "-c", POWERSGD_STATE, os.path.join(halves, "checkpoint.pt")], timeout=120)
            self.assertEqual(code, 0, err)
            self.assertRegex(out, r"^iteration 4 errors \['error\.0\.0', 'error\.0\.1'")
            code, out, err = run(launch(*SMALL, *powersgd, "--max-steps", "8", "--output", halves, "--resume",
                                        os.path.join(halves, "checkpoint.pt")), timeout=240)
            self.assertEqual(code, 0, out + err)
            self.assertEqual(compare_checkpoints(os.path.join(straight, "checkpoint.pt"),
                                                 os.path.join(halves, "checkpoint.pt")), identical("8 1 2 8 1 2"))

    def test_zero_1_shards_the_optimizer_beside_powersgd(self):
        """ZeRO-1 steps the same SGD on shards of the same compressed gradients: the weights end bit
        for bit where the whole optimizer's do."""
        powersgd = ["--comm-hook", "powersgd", "--powersgd-rank", "2", "--powersgd-start-iter", "2"]
        with tempfile.TemporaryDirectory(prefix="dpt_powersgd_zero_") as tmp:
            whole, sharded = os.path.join(tmp, "whole"), os.path.join(tmp, "sharded")
            for out_dir, zero in ((whole, []), (sharded, ["--zero", "1"])):
                code, out, err = run(launch(*SMALL, *powersgd, *zero, "--max-steps", "6", "--output", out_dir),
                                     timeout=240)
                self.assertEqual(code, 0, out + err)
            comparison = compare_checkpoints(os.path.join(whole, "checkpoint.pt"), os.path.join(sharded, "checkpoint.pt"))
            self.assertTrue(comparison.bitwise, comparison)

    def test_refuses_what_it_cannot_run(self):
        # (CLI11 exits 105 for a value its parser refuses, 2 for a refusal of dptrain's.)
        for flags, code_expected, message in (
                (["--powersgd-rank", "2"], 2, "--powersgd-rank belongs to --comm-hook powersgd"),
                (["--comm-hook", "lowrank"], 105, "unknown communication hook 'lowrank': allreduce, fp16, bf16 or "
                                                  "powersgd"),
                (["--comm-hook", "fp16", "--mode", "hvd"], 2, "--comm-hook needs --mode ddp"),
                (["--comm-hook", "powersgd", "--zero", "2"], 2, "--comm-hook powersgd cannot go with --zero 2")):
            with self.subTest(flags=" ".join(flags)):
                code, out, err = run([dptrain(), "train", *SMALL, *flags, "--max-steps", "1"], timeout=60)
                self.assertEqual(code, code_expected, out + err)
                self.assertIn(message, err)


class CheckpointFiles(unittest.TestCase):
    def test_keep_last_k_and_best_all_load_in_python(self):
        with tempfile.TemporaryDirectory(prefix="dpt_ckfiles_") as tmp:
            code, out, err = run([dptrain(), "train", *SMALL, "--epochs", "4", "--dummy-train-size", "32",
                                  "--keep-checkpoints", "2", "--output", tmp], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            names = sorted(n for n in os.listdir(tmp) if n.endswith(".pt"))
            self.assertEqual(names, ["checkpoint.pt", "checkpoint_epoch3.pt", "checkpoint_epoch4.pt", "model_best.pt"])
            # Beside them, the logs: one JSONL record per epoch summary (4 train + 4 val) and per
            # logged step, and one TensorBoard event file.
            with open(os.path.join(tmp, "metrics.jsonl")) as f:
                phases = [json.loads(line)["phase"] for line in f]
            self.assertEqual((phases.count("train"), phases.count("val")), (4, 4), phases)
            self.assertEqual(len([n for n in os.listdir(tmp) if n.startswith("events.out.tfevents.")]), 1)
            code, out, err = run([PYTHON, "-c", (
                "import sys, torch\n"
                "for f in sys.argv[1:]:\n"
                "    c = torch.load(f)\n"
                "    print(f.rsplit('/', 1)[1], c['epoch'], c['arch'], c['global_step'], round(c['best_acc1'], 6) >= 0)\n"),
                *[os.path.join(tmp, n) for n in names]], timeout=120)
            self.assertEqual(code, 0, err)
            self.assertEqual(out.splitlines(), ["checkpoint.pt 4 resnet20 16 True", "checkpoint_epoch3.pt 3 resnet20 12 True",
                                                "checkpoint_epoch4.pt 4 resnet20 16 True",
                                                out.splitlines()[3]])
            self.assertRegex(out.splitlines()[3], r"^model_best.pt [1-4] resnet20 (4|8|12|16) True$")

    def test_killed_run_leaves_a_loadable_checkpoint(self):
        with tempfile.TemporaryDirectory(prefix="dpt_kill_") as tmp:
            started = Started([dptrain(), "train", *SMALL, "--epochs", "1000", "--dummy-train-size", "16",
                               "--output", tmp], env=alone())
            try:
                deadline = time.monotonic() + 120
                while not os.path.exists(os.path.join(tmp, "checkpoint_epoch2.pt")) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertTrue(os.path.exists(os.path.join(tmp, "checkpoint_epoch2.pt")), "no checkpoint in 120 s")
                os.killpg(started.proc.pid, signal.SIGKILL)  # at whatever point of a write it is
                started.proc.wait(timeout=30)
            finally:
                started.close()
            code, out, err = run([PYTHON, "-c", (
                "import sys, torch\n"
                "c = torch.load(sys.argv[1])\n"
                "print(c['arch'], c['epoch'] >= 2, len(c['state_dict']))\n"), os.path.join(tmp, "checkpoint.pt")],
                timeout=120)
            self.assertEqual(code, 0, err)
            self.assertEqual(out.strip(), "resnet20 True 116")


if __name__ == "__main__":
    unittest.main()

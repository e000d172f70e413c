"""GoogLeNet's auxiliary classifiers in `dptrain train`, from torchvision's initial weights: one
step moves the heads (their losses are in the objective) and the trunk differently from a run
with --no-aux-logits, while the main classifier, which only the main loss reaches, moves the same;
2 DDP ranks with synchronised batch norm train the heads as one process on the combined batch
does; --mode dp and too small Inception v3 inputs are refused with what to do."""

import os
import shutil
import tempfile
import unittest

import torch
import torchvision

from proc import dptrain, env_with, run

BOUND = 150
ENV = env_with(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", MASTER_PORT=None, MASTER_ADDR=None, RANK=None,
               WORLD_SIZE=None, LOCAL_RANK=None)
# One plain SGD step on 16 synthetic images, dropout off so that ranks and runs can agree.
STEP = ["train", "--dummy", "-a", "googlenet", "--dummy-train-size", "64", "--dummy-val-size", "20", "-j", "1",
        "--deterministic", "--dropout", "0", "--max-steps", "1", "--epochs", "1", "--lr", "0.5", "--momentum", "0",
        "--wd", "0", "--no-lr-scaling"]


def close(a, b):
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def moved_alike(a, b, initial):
    """Whether a step took `initial` to `a` and to `b` alike: to within 5% of the move (batch norm
    statistics and gradients summed over other partitions of the batch round apart, and batch
    norm's backward amplifies it where a channel's variance is small: at most 1.6e-4 of the move on
    LibTorch 1.13, 1.4e-2 on 2.6; ranks without --sync-bn land 1.1-2.5 moves apart)."""
    return ((a - initial) - (b - initial)).abs().max() <= 5e-2 * (a - initial).abs().max()


class AuxiliaryHeads(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dpt_aux_")
        torch.manual_seed(0)
        initial = torchvision.models.googlenet(num_classes=10, init_weights=True).state_dict()
        cls.initial = dict(initial)
        cls.pretrained = os.path.join(cls.dir, "initial.pt")
        torch.save(cls.initial, cls.pretrained)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def step(self, name, *extra, ranks=1, size=32, sync_bn=True):
        out_dir = os.path.join(self.dir, name)
        args = [dptrain(), *STEP, "--image-size", str(size), *(["--sync-bn"] if sync_bn else []), "--pretrained",
                self.pretrained, "--output", out_dir, *extra]
        if ranks > 1:
            args = [dptrain(), "launch", "--standalone", "--nproc-per-node", str(ranks), "--", *args]
        code, out, err = run(args, timeout=BOUND, env=ENV)
        self.assertEqual(code, 0, out + err)
        return torch.load(os.path.join(out_dir, "checkpoint.pt"))["state_dict"]

    def test_one_step_with_and_without_the_heads(self):
        with_heads = self.step("heads", "-b", "16")
        without = self.step("no_heads", "-b", "16", "--no-aux-logits")
        self.assertEqual(list(with_heads), list(self.initial))
        self.assertEqual([k for k in self.initial if not k.startswith("aux")], list(without))
        for head in ("aux1", "aux2"):
            self.assertFalse(close(with_heads[f"{head}.fc2.weight"], self.initial[f"{head}.fc2.weight"]), head)
        # The heads' losses reach the trunk below them, not the main classifier.
        self.assertFalse(close(with_heads["inception4a.branch1.conv.weight"], without["inception4a.branch1.conv.weight"]))
        self.assertTrue(close(with_heads["fc.weight"], without["fc.weight"]))
        self.assertFalse(close(with_heads["fc.weight"], self.initial["fc.weight"]))

    def test_two_ranks_train_the_heads_as_one_process_on_both_batches(self):
        # At 64 px: at 32 px the last stages normalise 1x1 maps of 16 images, and batch norm's
        # backward amplified the two partitions' rounding further.
        one = self.step("one", "-b", "16", size=64)
        two = self.step("two", "-b", "8", ranks=2, size=64)
        for name, tensor in one.items():
            if tensor.is_floating_point():
                self.assertTrue(moved_alike(two[name], tensor, self.initial[name]), name)
        # The comparison can fail: ranks normalising their own halves (no --sync-bn) move conv1
        # by more than its whole move apart (measured: 2.46 against 1.93).
        apart = self.step("apart", "-b", "8", ranks=2, size=64, sync_bn=False)
        self.assertFalse(moved_alike(apart["conv1.conv.weight"], one["conv1.conv.weight"],
                                     self.initial["conv1.conv.weight"]))

    def test_dp_mode_and_small_inception_inputs_are_refused(self):
        code, out, err = run([dptrain(), "train", "--dummy", "-a", "googlenet", "--mode", "dp", "--replicas", "2"],
                             timeout=BOUND, env=ENV)
        self.assertEqual(code, 2, out + err)
        self.assertIn("--mode dp cannot train the auxiliary classifiers of googlenet; use --mode ddp, or train "
                      "without them (--no-aux-logits)", err)
        code, out, err = run([dptrain(), "train", "--dummy", "-a", "inception_v3", "--image-size", "64"],
                             timeout=BOUND, env=ENV)
        self.assertEqual(code, 2, out + err)
        self.assertIn("inception_v3's auxiliary classifier needs images of at least 299 px, got 64", err)


if __name__ == "__main__":
    unittest.main()

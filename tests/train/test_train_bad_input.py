"""Bad input to `dptrain train` and `dptrain eval` ends with one clear line and a nonzero exit
before any process group is created, so nothing waits for peers (also under `dptrain launch`)."""

import os
import tempfile
import unittest

from proc import dptrain, run


def train(*args, timeout=60):
    return run([dptrain(), "train", *args], timeout=timeout)


class BadInput(unittest.TestCase):
    def test_missing_data_folder(self):
        code, out, err = train("/nonexistent/imagenet")
        self.assertEqual((code, err), (1, "dptrain: error: data folder '/nonexistent/imagenet' does not exist or is "
                                          "not a folder\n"))

    def test_no_data_and_no_dummy(self):
        code, out, err = train()
        self.assertEqual(code, 2)
        self.assertEqual(err.splitlines(), ["dptrain: error: no data folder given: pass DATA (an ImageFolder with "
                                            "train/ and val/, or a CIFAR-10 binary folder), or --dummy for the "
                                            "synthetic set"])

    def test_unknown_arch(self):
        code, out, err = train("--dummy", "-a", "resnet7")
        self.assertEqual(code, 2)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith("dptrain: error: unknown model architecture 'resnet7'; choose one of: "), err)

    def test_missing_resume_checkpoint(self):
        code, out, err = train("--dummy", "--resume", "/nonexistent/checkpoint.pt")
        self.assertEqual((code, err), (1, "dptrain: error: checkpoint /nonexistent/checkpoint.pt does not exist; "
                                          "check the path given to --resume (or use --resume auto)\n"))

    def test_missing_pretrained_weights(self):
        code, out, err = train("--dummy", "--pretrained", "/nonexistent/w.pt")
        self.assertEqual((code, err), (1, "dptrain: error: weights file /nonexistent/w.pt does not exist; "
                                          "check the path given to --pretrained\n"))

    def test_corrupt_checkpoint_under_launch_fails_fast_on_every_rank(self):
        with tempfile.TemporaryDirectory(prefix="dpt_bad_") as tmp:
            bad = os.path.join(tmp, "checkpoint.pt")
            with open(bad, "wb") as f:
                f.write(b"PK\x03\x04 not a checkpoint")
            code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(),
                                  "train", "--dummy", "-a", "resnet20", "--resume", bad], timeout=120)
            self.assertNotEqual(code, 0)
            lines = [l for l in err.splitlines() if "dptrain: error: checkpoint" in l]
            self.assertGreaterEqual(len(lines), 1, err)
            self.assertIn(f"dptrain: error: checkpoint {bad} (21 bytes) is truncated or corrupt: ", lines[0])
            self.assertNotIn("timed out", err)

    def test_non_finite_loss_stops_every_rank_at_the_same_step(self):
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(),
                              "train", "--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "64",
                              "-b", "8", "-j", "1", "--lr", "1e30"], timeout=120)
        self.assertNotEqual(code, 0)
        # Every rank that got to print (the launcher stops the rest once one fails) names the same step.
        lines = [line for line in err.splitlines() if line.startswith("[rank ") and "dptrain: error:" in line]
        self.assertGreaterEqual(len(lines), 1, err)
        for line in lines:
            self.assertRegex(line, r"^\[rank (\d)\] dptrain: error: rank \1: the loss is not finite at step 2 "
                                   r"\(epoch 1, step 2\); lower --lr or lengthen --warmup-epochs$")

    def test_eval_of_a_missing_checkpoint(self):
        code, out, err = run([dptrain(), "eval", "--dummy", "--checkpoint", "/nonexistent/w.pt"], timeout=60)
        self.assertEqual((code, err), (1, "dptrain: error: checkpoint /nonexistent/w.pt does not exist; check the "
                                          "path given to --checkpoint\n"))


if __name__ == "__main__":
    unittest.main()

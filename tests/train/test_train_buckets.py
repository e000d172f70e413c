"""DDP's bucket size chosen by measuring the first steps where --bucket-cap-mb gives none
(parallel/bucket_tuner.h): the choice is said and kept in the checkpoints, a resume keeps it, and
rebucketing mid-run changes no number (two ranks sum each element alike in any bucket)."""

import os
import re
import tempfile
import unittest

import torch

from proc import dptrain, run
from train_runs import compare_checkpoints, identical

# ResNet-20's gradients (1.03 MiB) make the sweep 1 and 4 MiB: six steps of the eight.
RUN = ["train", "--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-train-size", "256",
       "--dummy-val-size", "32", "-b", "16", "-j", "1", "--lr", "0.2", "--seed", "7", "--deterministic", "-p", "1"]


def train(*args):
    code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), *RUN, *args],
                         timeout=240)
    assert code == 0, out + err
    return [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[rank 0] buckets:")]


class TunedBuckets(unittest.TestCase):
    def test_tuned_run_says_its_choice_keeps_it_and_equals_a_run_given_it(self):
        with tempfile.TemporaryDirectory() as tmp:
            tuned, given = os.path.join(tmp, "tuned"), os.path.join(tmp, "given")
            said = train("--epochs", "1", "--output", tuned)
            self.assertEqual(said[0], "buckets: tuning over the first 6 steps")
            chosen = re.fullmatch(r"buckets: tuned to (1|4) MiB \(1: \d+ ms, 4: \d+ ms\), the mean of each size's "
                                  r"backward and reduction \(the slowest rank's\)", said[1])
            self.assertIsNotNone(chosen, said)
            self.assertEqual(torch.load(os.path.join(tuned, "checkpoint.pt"))["bucket_cap_mb"], float(chosen[1]))

            # Given the size, nothing is tuned or said, and the weights are the tuned run's, bit for bit.
            self.assertEqual(train("--epochs", "1", "--output", given, "--bucket-cap-mb", chosen[1]), [])
            self.assertEqual(compare_checkpoints(os.path.join(tuned, "checkpoint.pt"),
                                                 os.path.join(given, "checkpoint.pt")), identical("8 1 0 8 1 0"))
            self.assertNotIn("bucket_cap_mb", torch.load(os.path.join(given, "checkpoint.pt")))

            # A resume takes the choice back instead of measuring again, and keeps it.
            self.assertEqual(train("--epochs", "2", "--output", tuned, "--resume", "auto"),
                             [f"buckets: {chosen[1]} MiB, as the run resumed chose"])
            self.assertEqual(torch.load(os.path.join(tuned, "checkpoint.pt"))["bucket_cap_mb"], float(chosen[1]))

    def test_kept_where_tuning_would_break_something(self):
        said = train("--epochs", "1", "--max-steps", "1", "--comm-hook", "powersgd")
        self.assertEqual(said, ["buckets: 25 MiB, not tuned (PowerSGD keeps its state per bucket)"])


if __name__ == "__main__":
    unittest.main()

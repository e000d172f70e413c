"""Distributed evaluation is exact: `dptrain eval` on 2 processes over a validation set of odd size
(unequal shards, no padded duplicates) gives the counts of one process exactly and the same loss
(`dptrain train -e` too). `-a` naming another model than the checkpoint's is refused. Evaluation
reads only the validation split: a training split it does not use neither bounds its batch nor
needs to exist."""

import os
import shutil
import tempfile
import unittest

from proc import dptrain, run
from train_runs import alone, last_json

DATA = ["--dummy", "--image-size", "16", "--dummy-train-size", "32", "--dummy-val-size", "101", "-j", "1"]


class DistributedEval(unittest.TestCase):
    def test_two_ranks_equal_one_process(self):
        with tempfile.TemporaryDirectory(prefix="dpt_eval_") as tmp:
            code, out, err = run([dptrain(), "train", *DATA, "-a", "resnet20", "-b", "16", "--max-steps", "2",
                                  "--output", tmp], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            checkpoint = os.path.join(tmp, "checkpoint.pt")
            code, out, err = run([dptrain(), "eval", *DATA, "-b", "16", "--checkpoint", checkpoint], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            single = last_json(out)
            # -a naming another model than the checkpoint records: refused naming both, before
            # any weight is loaded (it ended in a state-dict mismatch); -a naming its own passes.
            code, out, err = run([dptrain(), "eval", *DATA, "-a", "resnet18", "-b", "16", "--checkpoint", checkpoint],
                                 timeout=240, env=alone())
            self.assertEqual(code, 2, out + err)
            self.assertEqual(err.splitlines(), [f'dptrain: error: checkpoint {checkpoint} holds a resnet20 (its "arch"), '
                                                'not a resnet18: pass -a resnet20, or leave -a out'])
            code, out, err = run([dptrain(), "eval", *DATA, "-a", "resnet20", "-b", "16", "--checkpoint", checkpoint],
                                 timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            self.assertEqual(last_json(out), single)
            code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(),
                                  "eval", *DATA, "-b", "16", "--checkpoint", checkpoint], timeout=240)
            self.assertEqual(code, 0, out + err)
            two = last_json(out)
            code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(),
                                  "train", *DATA, "-a", "resnet20", "-b", "16", "-e", "--resume", checkpoint],
                                 timeout=240)
            self.assertEqual(code, 0, out + err)
            evaluate_flag = last_json(out)["val"]
            print("single", single, "two ranks", two)
            self.assertEqual(single["count"], 101)
            for key in ("count", "correct1", "correct5"):
                self.assertEqual(two[key], single[key], key)
                self.assertEqual(evaluate_flag[key], single[key], key)
            # Losses are summed in float64, but each comes from float32 logits, and the convolutions'
            # rounding can depend on the batch a sample is in (its shard's batches differ from one
            # process's): seen 3e-10 relative in a minimal Debian 12 root, so float32's 1e-6.
            self.assertAlmostEqual(two["loss_sum"], single["loss_sum"], delta=1e-6 * abs(single["loss_sum"]))
            self.assertAlmostEqual(evaluate_flag["loss_sum"], single["loss_sum"], delta=1e-6 * abs(single["loss_sum"]))


class EvalReadsOnlyValidation(unittest.TestCase):
    def test_a_small_training_split_or_none_at_all(self):
        with tempfile.TemporaryDirectory(prefix="dpt_eval_val_") as tmp:
            data, run_dir, val_only = (os.path.join(tmp, name) for name in ("data", "run", "val_only"))
            code, out, err = run([dptrain(), "make-dataset", "--train-size", "10", "--val-size", "37", "--image-size",
                                  "16", data], timeout=60)
            self.assertEqual(code, 0, err)
            common = ["--image-size", "16", "-j", "1"]
            code, out, err = run([dptrain(), "train", data, *common, "-a", "resnet20", "-b", "8", "--max-steps", "1",
                                  "--output", run_dir], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            checkpoint = os.path.join(run_dir, "checkpoint.pt")
            # Training refuses a batch larger than its 10 images; evaluation takes 16 of the 37.
            code, out, err = run([dptrain(), "train", data, *common, "-a", "resnet20", "-b", "16"], timeout=240,
                                 env=alone())
            self.assertEqual(code, 2, out + err)
            self.assertIn("-b 16 is more than the 10 training images", err)
            code, out, err = run([dptrain(), "eval", data, *common, "-b", "16", "--checkpoint", checkpoint],
                                 timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            whole = last_json(out)
            self.assertEqual(whole["count"], 37)
            # ImageNet's val/ kept apart: the same pass, the same numbers; training needs train/.
            shutil.copytree(os.path.join(data, "val"), os.path.join(val_only, "val"))
            code, out, err = run([dptrain(), "eval", val_only, *common, "-b", "16", "--checkpoint", checkpoint],
                                 timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            self.assertEqual(last_json(out), whole)
            code, out, err = run([dptrain(), "train", val_only, *common, "-a", "resnet20", "-b", "8"], timeout=240,
                                 env=alone())
            self.assertEqual(code, 1, out + err)
            self.assertIn(f"data folder '{val_only}' has no train/ folder", err)
            # Without val/ either, evaluation says what it reads.
            shutil.rmtree(os.path.join(val_only, "val"))
            code, out, err = run([dptrain(), "eval", val_only, *common, "--checkpoint", checkpoint], timeout=240,
                                 env=alone())
            self.assertEqual((code, err), (1, f"dptrain: error: data folder '{val_only}' has no val/ folder; evaluation "
                                              "reads val/ (an ImageFolder or a shard set), or CIFAR-10's "
                                              "test_batch.bin\n"))


if __name__ == "__main__":
    unittest.main()

"""A number no flag of dptrain's tools can take (check, make-dataset, bench-*) ends the command with
one clear line before anything runs, never with LibTorch's stack trace, a null figure or a full
disk. Each of these once did one of those: `bench-models --image-size 0` failed inside a
convolution with a 30-frame trace, `-b 0` and `--steps 0` printed 0 or null images/s,
`bench-peak --seconds nan` measured anyway, `check --numel -5` failed creating its tensor, and
`make-dataset --classes 999999999999` wrote 1.3 million empty class folders a minute. A loader
thread the system refuses ended the program in std::terminate; now it is one line too."""

import os
import resource
import shutil
import tempfile
import unittest

from proc import dptrain, run


def command(*args):
    return run([dptrain(), *args], timeout=60)


class CommandFlags(unittest.TestCase):
    def test_a_number_outside_a_flags_bounds_is_a_usage_error(self):
        cases = [
            (["bench-models", "resnet18", "--image-size", "0"], "--image-size: takes a number of at least 8, got 0"),
            (["bench-models", "resnet18", "-b", "0"], "--batch-size: takes a number of at least 1, got 0"),
            (["bench-models", "resnet18", "--steps", "0"], "--steps: takes a number of at least 1, got 0"),
            (["bench-peak", "--seconds", "nan"], "--seconds: takes a number above 0, got nan"),
            (["bench-loader", "/nonexistent", "--epochs", "0"], "--epochs: takes a number of at least 1, got 0"),
            (["bench-ddp", "--bucket-cap-mb", "inf"], "--bucket-cap-mb: takes a number above 0, got inf"),
            (["bench-dp", "--threads", "0"], "--threads: takes a number of at least 1, got 0"),
            (["bench-dp", "--gpus", "0,-1"], "--gpus: takes a number of at least 0, got -1"),
            (["check", "--numel", "-5"], "--numel: takes a number of at least 1, got -5"),
            (["make-dataset", "/nonexistent/out", "--quality", "0"], "--quality: takes a number from 1 to 100, got 0"),
            (["make-dataset", "/nonexistent/out", "--image-size", "100000"],
             "--image-size: takes a number from 8 to 4096, got 100000"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                code, out, err = command(*args)
                self.assertEqual((code, out), (105, ""))  # CLI11's exit status for a value its check refuses
                self.assertEqual(err.splitlines(), [message, "Run with --help for more information."])

    def test_make_dataset_writes_nothing_for_classes_a_split_cannot_fill(self):
        # Sample i is of class i % classes: past a split's size a class would be an empty folder.
        with tempfile.TemporaryDirectory() as parent:
            out = os.path.join(parent, "set")
            code, stdout, err = command("make-dataset", out, "--classes", "999999999999")
            self.assertEqual(code, 2)
            self.assertEqual(err.splitlines(), ["dptrain: error: --classes 999999999999 needs at least one image of "
                                                "each class in both splits, got --train-size 1000 and --val-size 200"])
            self.assertFalse(os.path.exists(out))
            # as many classes as the smaller split has images: every folder gets one at least
            code, stdout, err = command("make-dataset", out, "--train-size", "6", "--val-size", "3", "--classes", "3",
                                        "--image-size", "8")
            self.assertEqual(code, 0, err)
            self.assertEqual([len(os.listdir(os.path.join(out, "val", c))) for c in sorted(os.listdir(
                os.path.join(out, "val")))], [1, 1, 1])

    def test_make_dataset_never_writes_over_a_set(self):
        # A 5-class set rewritten with 2 classes kept the other 3 folders: it read back as 5 classes.
        with tempfile.TemporaryDirectory() as out:
            small = ("--val-size", "5", "--image-size", "8")
            code, stdout, err = command("make-dataset", out, "--train-size", "10", "--classes", "5", *small)
            self.assertEqual(code, 0, err)
            code, stdout, err = command("make-dataset", out, "--train-size", "4", "--classes", "2", *small)
            self.assertEqual((code, err), (2, f"dptrain: error: {out}/train already holds files, which would mix "
                                              "with the new images: choose an empty or new folder, or remove "
                                              f"{out}/train and {out}/val first\n"))
            self.assertEqual(sum(len(files) for _, _, files in os.walk(os.path.join(out, "train"))), 10)
            # an empty split folder holds no set
            shutil.rmtree(os.path.join(out, "train"))
            shutil.rmtree(os.path.join(out, "val"))
            os.makedirs(os.path.join(out, "train"))
            code, stdout, err = command("make-dataset", out, "--train-size", "4", "--classes", "2", *small)
            self.assertEqual(code, 0, err)
            self.assertEqual(sorted(os.listdir(os.path.join(out, "train"))), ["class_000", "class_001"])

    def test_a_loader_thread_the_system_refuses_is_a_clear_error(self):
        # Under a 3 GB address-space limit the system refuses a thread's stack after some hundred:
        # the threads started were destroyed unjoined, and the program ended in std::terminate
        # ("terminate called without an active exception", SIGABRT).
        with tempfile.TemporaryDirectory() as out:
            code, stdout, err = command("make-dataset", out, "--train-size", "4", "--val-size", "1", "--classes", "1",
                                        "--image-size", "8")
            self.assertEqual(code, 0, err)
            limit = 3 * 10**9
            code, stdout, err = run([dptrain(), "bench-loader", os.path.join(out, "train"), "--threads", "1024"],
                                    timeout=60,
                                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
            self.assertEqual(code, 2, err)
            self.assertRegex(err, r"^dptrain: error: loader: the system refused worker thread [0-9]+ of 1024 \(.+\); "
                                  r"use fewer loader threads \(-j/--workers\)\n$")
            code, stdout, err = command("bench-loader", os.path.join(out, "train"), "--threads", "1025")
            self.assertEqual(code, 2)
            self.assertEqual(err, "dptrain: error: loader: thread count must be from 1 to 1024, got 1025\n")


if __name__ == "__main__":
    unittest.main()

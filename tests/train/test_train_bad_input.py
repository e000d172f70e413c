"""Bad input to `dptrain train` and `dptrain eval` ends with one clear line and a nonzero exit
before any process group is created, so nothing waits for peers (also under `dptrain launch`).
Bad images are never silent: each pass names how many were skipped and which; past
--max-bad-images (a fraction of the pass) every rank stops at the same step, before that step's
checkpoint; a pass without a usable image is an error."""

import glob
import json
import os
import re
import shutil
import tempfile
import unittest

import torch

from proc import PYTHON, dptrain, env_with, run, without_gloo_info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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

    def test_a_timeout_that_fits_no_clock(self):
        # Found while writing fuzz/train_cli: these reached a conversion to integer milliseconds, which is
        # undefined for them (UBSan), and went on with whatever timeout came out.
        for flag, seconds in [("--dist-timeout", "1e300"), ("--rendezvous-timeout", "nan"), ("--dist-timeout", "-5")]:
            with self.subTest(flag=flag, seconds=seconds):
                code, out, err = train("--dummy", flag, seconds)
                self.assertEqual(code, 2)
                self.assertEqual(err.splitlines(), [f"dptrain: error: {flag} takes seconds from 0 to 1e+09, got "
                                                    f"{float(seconds):g}"])

    def test_a_heartbeat_is_auto_off_or_seconds_twice_its_confirmation(self):
        for value in ("1.5", "x", "3s", "nan"):
            with self.subTest(value=value):
                code, out, err = train("--dummy", "--heartbeat", value)
                self.assertEqual(code, 2)
                self.assertEqual(err.splitlines(), [f"dptrain: error: --heartbeat takes 'auto', 'off' or seconds of at "
                                                    f"least 2 (a suspect is confirmed over 1 s, at most half the bound), "
                                                    f"got '{value}'"])

    def test_a_flag_value_is_a_word_or_a_count_that_fits_a_number(self):
        # Found by fuzz/train_cli: CLI11 2.1 let stoll's std::out_of_range escape ("dptrain: error:
        # stoll", exit 1); CLI11 2.4 read the count as true, so the negated flag switched its feature on.
        for arg in ("--no-checkpoint-async=77777777777777777777777", "--checkpoint-async=-9223372036854775809",
                    "--amp=maybe", "--amp=0x10"):
            with self.subTest(arg=arg):
                code, out, err = train("--dummy", arg)
                self.assertEqual(code, 2)
                name = arg.split("=")[0]
                self.assertEqual(err.splitlines(), [f"dptrain: error: {arg}: a flag takes true or false (on/off, yes/no, "
                                                    f"1/0) or a count such as {name}=2 that fits a 64-bit number"])
        # the edge of the range and the words, any case, are flags' values still
        with tempfile.TemporaryDirectory() as output:
            code, out, err = train("--dummy", "-a", "resnet20", "--image-size", "32", "-b", "8", "--max-steps", "1",
                                   "--dummy-train-size", "16", "--dummy-val-size", "8", "--output", output,
                                   "--no-checkpoint-async=9223372036854775807", "--amp=Off")
            self.assertEqual((code, without_gloo_info(err)), (0, ""))
            self.assertTrue(os.path.exists(os.path.join(output, "checkpoint.pt")))

    def test_a_number_outside_its_flags_bounds(self):
        # CLI11's own range checks compare, and every comparison with NaN is false: --label-smoothing nan
        # trained without smoothing, --lr, --momentum and --dropout nan ended in LibTorch's stack trace
        # after the model was built, --wd inf was taken (its first update makes the weights infinite).
        cases = [("--label-smoothing", "nan", "from 0 to 1"), ("--lr", "nan", "above 0"),
                 ("--momentum", "nan", "of at least 0"), ("--dropout", "nan", "from 0 to 1"),
                 ("--wd", "inf", "of at least 0"), ("--bucket-cap-mb", "inf", "above 0"),
                 ("--mixup-alpha", "-inf", "of at least 0"), ("--model-ema-decay", "1.5", "from 0 to 1"),
                 # a list's every number; a device index of -1 would be LibTorch's "current device"
                 ("--lr-milestones", "30,-1", "of at least 0"), ("--gpu", "-1", "of at least 0"),
                 ("--gpus", "0,-1", "of at least 0"),
                 # 99999999999 synthetic images ran out of memory in the sampler
                 ("--dummy-train-size", "99999999999", "from 1 to 1e+08"), ("--dummy-val-size", "0", "from 1 to 1e+08"),
                 ("--dummy-classes", "200000", "from 1 to 100000")]
        for flag, value, bounds in cases:
            with self.subTest(flag=flag, value=value):
                code, out, err = train("--dummy", flag, value)
                self.assertEqual((code, out), (105, ""))  # CLI11's exit status for a value its check refuses
                shown = value.split(",")[-1]  # the list's number out of bounds
                self.assertEqual(err.splitlines(), [f"{flag}: takes a number {bounds}, got {shown}",
                                                    "Run with --help for more information."])

    def test_a_step_larger_than_a_ranks_share_of_the_set(self):
        # -b 99999999999 on the synthetic set trained one short step an epoch at a learning rate scaled
        # for the whole batch (3.9e7), and the model diverged.
        small = ("--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "64",
                 "--dummy-val-size", "16", "-j", "1", "--epochs", "1")
        code, out, err = train(*small, "-b", "65")
        self.assertEqual((code, err), (2, "dptrain: error: rank 0: -b 65 is more than the 64 training images each "
                                          "of the 1 process(es) takes per epoch (64 in all): every epoch would be "
                                          "one short step, its learning rate scaled for a full one; use -b of at "
                                          "most 64\n"))
        code, out, err = train(*small, "-b", "33", "--accum-steps", "2")
        self.assertEqual(code, 2, err)
        self.assertIn("-b 33 x --accum-steps 2 is more than the 64 training images", err)
        code, out, err = train(*small, "-b", "32", "--accum-steps", "2")  # exactly the set: one full step
        self.assertEqual(code, 0, err)

    def test_a_diverged_model_is_never_the_best_and_non_finite_weights_are_never_written(self):
        # One step of --lr 1e30: the weights are huge but finite, and evaluation's BatchNorm turns
        # them into NaN. With --wd 1e30 too, the update makes them infinite.
        small = ("--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "64",
                 "--dummy-val-size", "32", "-b", "64", "-j", "1", "--epochs", "1", "--lr", "1e30")
        with tempfile.TemporaryDirectory(prefix="dpt_diverged_") as out_dir:
            code, out, err = train(*small, "--output", out_dir)
            self.assertEqual(code, 0, err)
            self.assertIn("warning: the validation loss after epoch 1 is not finite: the model has diverged, so "
                          "this epoch is not taken as the best", out)
            self.assertEqual(sorted(f for f in os.listdir(out_dir) if f.endswith(".pt")),
                             ["checkpoint.pt", "checkpoint_epoch1.pt"])  # no model_best.pt
            self.assertEqual(torch.load(os.path.join(out_dir, "checkpoint.pt"))["best_acc1"], 0.0)
        with tempfile.TemporaryDirectory(prefix="dpt_diverged_") as out_dir:
            code, out, err = train(*small, "--wd", "1e30", "--output", out_dir)
            reason = ("its tensor state_dict/conv1.weight holds NaN or an infinity: training has diverged (lower "
                      "--lr, lengthen --warmup-epochs or clip with --clip-grad-norm)")
            self.assertIn(f"checkpoint: the checkpoint of step 1 was not written: {reason}. The files it would "
                          "have replaced are kept", out)
            self.assertEqual((code, err), (1, f"dptrain: error: the last checkpoint (step 1) was not written: "
                                              f"{reason}; any checkpoint in {out_dir} is an older one\n"))
            self.assertEqual([f for f in os.listdir(out_dir) if f.endswith(".pt")], [])

    def test_libtorchs_errors_are_one_line_with_what_to_do(self):
        # LibTorch 1.13 put its stack of 30-odd frames into each of these messages.
        small = ("--dummy", "--dummy-train-size", "2", "--dummy-val-size", "2", "-b", "2", "-j", "1", "--epochs", "1")
        cases = [(("-a", "alexnet", "--image-size", "16"), "Output size is too small; the images are too small for "
                  "this model: raise --image-size (`dptrain models` lists the size each model was made for)"),
                 (("-a", "resnet20", "--image-size", "100000"), "; the process ran out of memory: lower -b (images "
                  "per process) or --image-size, or pick a smaller model (-a)"),
                 # 65 images in batches of 32: the third holds one, and resnet18's last BatchNorm sees 1x1.
                 (("-a", "resnet18", "--dummy-train-size", "65", "-b", "32"), "got input size [1, 512, 1, 1]; a "
                  "batch of one image reached a BatchNorm whose input has shrunk to 1x1: an epoch's last batch "
                  "holds the training images each process takes modulo -b, so pick a -b that does not leave 1")]
        for args, said in cases:
            with self.subTest(args=args):
                code, out, err = train(*small, *args)
                self.assertEqual(code, 1, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertTrue(err.startswith("dptrain: error: LibTorch: "), err)
                self.assertIn(said, err)
                self.assertTrue(err.endswith(" (TORCH_SHOW_CPP_STACKTRACES=1 shows where in LibTorch)\n"), err)
        # Asked for, LibTorch's own account follows the message, and the advice comes last.
        code, out, err = run([dptrain(), "train", *small, *cases[0][0]], timeout=60,
                             env=env_with(TORCH_SHOW_CPP_STACKTRACES="1"))
        self.assertEqual(code, 1, err)
        self.assertIn("Output size is too small\nException raised from ", err)
        self.assertTrue(err.endswith("\nthe images are too small for this model: raise --image-size (`dptrain "
                                     "models` lists the size each model was made for)\n"), err)

    def test_a_gpu_the_process_does_not_see_is_named_in_one_line(self):
        # LibTorch refuses it only at the first tensor moved there, in lines that name no flag:
        # "invalid device ordinal" on a GPU machine, every backend it has without CUDA.
        commands = [("train", "--dummy", "--dummy-train-size", "2", "--dummy-val-size", "2", "--epochs", "1"),
                    ("bench-peak",), ("bench-models", "resnet20")]
        for command in commands:
            with self.subTest(command=command[0]):
                code, out, err = run([dptrain(), *command, "--gpu", "64"], timeout=60)
                self.assertEqual(code, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertRegex(err, r"^dptrain: error: (rank 0: )?--gpu 64: (this process sees no CUDA device|"
                                      r"no such GPU in this process)")
                self.assertIn("CUDA_VISIBLE_DEVICES", err)

    def test_splits_with_other_class_folders_and_a_hidden_folder(self):
        # Each split numbers its classes by their sorted folder names: a folder in one split only
        # would make validation score against other labels. A hidden one (.ipynb_checkpoints) sorts
        # first and would shift every class: it is no class.
        with tempfile.TemporaryDirectory(prefix="dpt_classes_") as data:
            code, out, err = run([dptrain(), "make-dataset", data, "--classes", "2", "--train-size", "8",
                                  "--val-size", "4", "--image-size", "16"], timeout=60)
            self.assertEqual(code, 0, err)
            os.makedirs(os.path.join(data, "train", ".ipynb_checkpoints"))
            small = (data, "-a", "resnet20", "--image-size", "16", "-b", "4", "-j", "1", "--epochs", "1")
            code, out, err = train(*small)
            self.assertEqual(code, 0, err)
            self.assertIn("data: ImageFolder, 8 training and 4 validation images, 2 classes", out)
            self.assertIn(f"warning: folder {data}/train/.ipynb_checkpoints is hidden: not a class, left out", out)
            os.makedirs(os.path.join(data, "val", "class_002"))
            code, out, err = train(*small)
            self.assertEqual((code, err), (1, "dptrain: error: train/ has 2 class folders and val/ 3, and each split "
                                              "numbers its classes by their sorted names: both need the same "
                                              "folders (only in train/: none; only in val/: class_002)\n"))

    def test_an_output_folder_that_cannot_be_one(self):
        # Both ended in the library's words ("filesystem error: cannot create directories: Not a
        # directory"), exit 1, the first only after the ranks had met.
        with tempfile.NamedTemporaryFile(prefix="dpt_output_") as file:
            code, out, err = train("--dummy", "-a", "resnet20", "--output", file.name)
            self.assertEqual((code, err), (2, f"dptrain: error: --output {file.name} is a file, not a folder: name a "
                                              "folder for the run's checkpoints and logs\n"))
            small = ("--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "8",
                     "--dummy-val-size", "8", "-b", "4", "-j", "1")
            code, out, err = train(*small, "--output", os.path.join(file.name, "run"))
            self.assertEqual((code, err), (2, f"dptrain: error: cannot create the --output folder {file.name}/run: "
                                              "Not a directory; choose a folder this process can write\n"))

    def test_missing_resume_checkpoint(self):
        code, out, err = train("--dummy", "--resume", "/nonexistent/checkpoint.pt")
        self.assertEqual((code, err), (1, "dptrain: error: checkpoint /nonexistent/checkpoint.pt does not exist; "
                                          "check the path given to --resume\n"))

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

    def test_a_runs_folder_given_as_its_checkpoint_names_the_files_in_it(self):
        with tempfile.TemporaryDirectory(prefix="dpt_folder_") as tmp:
            for name in ("model_best.pt", "checkpoint.pt", "metrics.jsonl"):
                open(os.path.join(tmp, name), "wb").close()
            for command, flag, what in [(("eval", "--dummy", "-a", "resnet20"), "--checkpoint", "checkpoint"),
                                        (("train", "--dummy", "-a", "resnet20"), "--resume", "checkpoint"),
                                        (("train", "--dummy", "-a", "resnet20"), "--pretrained", "weights file")]:
                with self.subTest(flag=flag):
                    code, out, err = run([dptrain(), *command, flag, tmp], timeout=60)
                    self.assertEqual((code, err), (1, f"dptrain: error: {what} {tmp} is a folder; give {flag} one "
                                                      "of its files: checkpoint.pt, model_best.pt\n"))

    def test_weights_made_for_other_classes_are_not_evaluated(self):
        # Fine-tuning starts their classifier fresh; a pass before any training would score chance.
        with tempfile.TemporaryDirectory(prefix="dpt_classes_") as tmp:
            small = ("--dummy", "-a", "resnet20", "--image-size", "16", "--dummy-train-size", "8",
                     "--dummy-val-size", "8", "-b", "4", "-j", "1")
            code, out, err = train(*small, "--max-steps", "1", "--output", tmp)
            self.assertEqual(code, 0, err)
            weights = os.path.join(tmp, "checkpoint.pt")
            refused = (f"dptrain: error: the weights in {weights} were made for 10 classes and this data has 5, so "
                       "their classifier (fc.weight, fc.bias) would be random: evaluate them on data with their "
                       "classes, or train to fine-tune them to these\n")
            for command in [("eval", *small, "--checkpoint", weights),
                            ("train", *small, "--evaluate", "--pretrained", weights)]:
                with self.subTest(command=command[0]):
                    code, out, err = run([dptrain(), *command, "--dummy-classes", "5"], timeout=60)
                    self.assertEqual((code, err), (2, refused))
            # Training fine-tunes the fresh classifier, then validates it.
            code, out, err = train(*small, "--epochs", "1", "--pretrained", weights, "--dummy-classes", "5")
            self.assertEqual(code, 0, err)
            self.assertIn("Epoch: [0] val ", out)
            # With its own classes, the same file evaluates.
            code, out, err = run([dptrain(), "eval", *small, "--checkpoint", weights], timeout=60)
            self.assertEqual(code, 0, err)
            self.assertEqual(json.loads(out.splitlines()[-1])["count"], 8)
            self.assertRegex(out, r"(?m)^Eval: val    Loss [0-9.]+  Acc@1 [0-9.]+  Acc@5 [0-9.]+  samples 8 ")



class BadImages(unittest.TestCase):
    """The digits ImageFolder (1,437 training and 360 validation images) with some files
    overwritten by bytes that are neither JPEG nor PNG."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dpt_bad_images_")
        cls.clean = os.path.join(cls.tmp, "digits")
        code, out, err = run([PYTHON, os.path.join(ROOT, "scripts", "make-digits-imagefolder"), cls.clean], timeout=120)
        assert code == 0, err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def corrupt(self, name, train_every=None, val_every=None):
        """A copy of the digits with every n-th training (validation) file, in sorted order, corrupt."""
        data = os.path.join(self.tmp, name)
        shutil.copytree(self.clean, data)
        for split, every in (("train", train_every), ("val", val_every)):
            if every:
                for path in sorted(glob.glob(os.path.join(data, split, "*", "*.png")))[::every]:
                    with open(path, "wb") as f:
                        f.write(b"GIF89a not an image this reader takes")
        return data

    def launch(self, data, *flags):
        out_dir = os.path.join(self.tmp, "out_" + os.path.basename(data))
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                              data, "-a", "resnet20", "--image-size", "32", "-b", "16", "-j", "1", "--epochs", "1",
                              "--output", out_dir, *flags], timeout=240)
        return code, out, err, out_dir

    def test_a_few_bad_images_are_counted_and_named_and_training_goes_on(self):
        # 29 of 1,437 training images (2%), 8 of 360 validation images: under a bound of 5%.
        data = self.corrupt("few", train_every=50, val_every=45)
        code, out, err, _ = self.launch(data, "--max-bad-images", "0.05")
        self.assertEqual(code, 0, out + err)
        # The sampler pads the pass to 1,438 with a repeated sample, which may be a bad one.
        train = re.search(r"\[rank 0\] Epoch: \[0\] train .* samples (\d+) .* bad images (\d+)", out)
        self.assertEqual(int(train[1]) + int(train[2]), 1438, out)
        self.assertIn(int(train[2]), (29, 30))
        self.assertRegex(out, r"\[rank 0\] Epoch: \[0\] val .* samples 352 .* bad images 8")
        for rank in (0, 1):
            self.assertRegex(out, rf"\[rank {rank}\] data: epoch 0 train: {train[2]} bad image\(s\) skipped \(all ranks; at "
                                  r"most 71 of 1437 allowed by --max-bad-images\)\. The first 3 of this rank's \d+:")
            self.assertRegex(out, rf"\[rank {rank}\] data: epoch 0 val: 8 bad image\(s\) skipped")
        named = re.findall(r"\[rank \d\]     image file (\S+) is neither JPEG nor PNG", out)
        self.assertGreaterEqual(len(named), 2 * 3 + 3, out)  # 3 per rank in training, 8 in validation
        self.assertTrue(all(path.startswith(data) for path in named), named)

    def test_past_the_bound_every_rank_stops_at_the_same_step_before_its_checkpoint(self):
        # 1 in 10 bad: the 1% bound (14 images) is passed within the first steps.
        data = self.corrupt("many", train_every=10)
        code, out, err, out_dir = self.launch(data, "--checkpoint-every", "1")
        self.assertNotEqual(code, 0, out + err)
        stops = re.findall(r"\[rank (\d)\] dptrain: error: epoch 0 train, step (\d+): (\d+) bad images skipped so "
                           r"far, more than the 14 \(--max-bad-images 0.01 of the pass's 1437\) that a run may skip; "
                           r"it stops here, before its next checkpoint", err)
        self.assertGreaterEqual(len(stops), 1, err)  # the launcher stops the other rank once one fails
        self.assertEqual(len({(step, count) for _, step, count in stops}), 1, stops)
        step, count = int(stops[0][1]), int(stops[0][2])
        self.assertGreater(count, 14)
        self.assertLess(count, 14 + 2 * 16)  # one step past the bound at most
        # Written every step, but not at the step that stopped (an earlier one may have been
        # skipped while the write before it was in flight): the file on disk reads back whole.
        checkpoint = torch.load(os.path.join(out_dir, "checkpoint.pt"))
        self.assertLess(checkpoint["global_step"], step)
        self.assertGreaterEqual(checkpoint["global_step"], 1)
        # Line by line: the two ranks' lines may interleave.
        self.assertRegex(err, r"The first 3 of this rank's \d+:\n")
        self.assertRegex(err, r"\[rank \d\]     image file \S+ is neither JPEG nor PNG")
        self.assertIn("Repair or remove them", err)

    def test_a_pass_without_a_usable_image_is_an_error(self):
        data = self.corrupt("all", val_every=1)
        code, out, err, _ = self.launch(data)
        self.assertNotEqual(code, 0, out + err)
        self.assertRegex(err, r"\[rank [01]\] dptrain: error: epoch 0 val: no usable image: all 360 read were bad\.")


if __name__ == "__main__":
    unittest.main()

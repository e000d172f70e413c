"""The small training run the Slurm, MPI and torchrun tests start under each launcher, and how to read its
result. The program and its arguments are named here only, so another trainer can take its place."""

import json
import re

from proc import dptrain

# A ResNet-20 on 512 synthetic 32px images for one epoch: a few seconds per process.
# --deterministic: one compute thread, so every launcher's run gives the same numbers bit for bit.
ARGS = ["--dummy", "-a", "resnet20", "--epochs", "1", "--dummy-train-size", "512", "--dummy-val-size", "333",
        "-b", "64", "-j", "1", "--deterministic", "--dist-timeout", "60"]
# Rank 0's last line: one JSON object, e.g. {"best_acc1":25.5,"epochs":1,"global_step":4,"val":{...,"count":333}}.
# It holds no timing, so it is the same for the same training under any launcher.
RESULT = re.compile(r'\{"best_acc1":.*"val":\{.*\}\}')
# Every sample of the validation set counted once over all ranks.
VAL_IMAGES = 333
# Arguments that make one rank fail (an unknown model) and the line it then prints.
FAILING_ARGS = ["-a", "resnet7"]
FAILURE = re.compile(r"dptrain: error: .*resnet7")


def argv():
    """The training program and its subcommand."""
    return [dptrain(), "train"]


def command(*extra):
    return [*argv(), *ARGS, *extra]


def world_line(processes):
    """The start-up line rank 0 prints when it has joined a group of `processes`."""
    return f"dptrain train: resnet20, {processes} process(es)"


def results(output):
    """Rank 0's result lines."""
    return RESULT.findall(output)


def val_images(result):
    """How many validation samples a result line counted over all ranks."""
    return json.loads(result)["val"]["count"]


def assert_same_training(test, reference, code, out, err, tagged_results):
    """That a 2-process run under a launcher that tags its workers' output ended as the reference did:
    `tagged_results` is (rank 0's result lines, the other rank's) as that launcher tagged them."""
    test.assertEqual(code, 0, out + err)
    test.assertEqual(out.count(world_line(2)), 1, out)
    ours, others = tagged_results
    test.assertEqual(ours, reference, out)
    test.assertEqual(others, [], out)  # only rank 0 reports
    test.assertEqual(val_images(ours[0]), VAL_IMAGES)


def launch_reference():
    """The same training under `dptrain launch` with 2 processes: what every launcher must reproduce."""
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", *command()]

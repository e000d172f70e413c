"""The small training run the Slurm and MPI tests start under each launcher, and how to read its
result. The program and its arguments are named here only, so another trainer can take its place."""

import os
import re

from proc import dptrain

# A ResNet-20 on 512 synthetic images for one epoch: a few seconds per process.
ARGS = ["--epochs", "1", "--train-size", "512", "--val-size", "333", "--timeout", "60"]
# Rank 0's result line: "epoch 1/1: train loss 2.1, val loss 2.0, val top-1 25.53% (333 images)".
RESULT = re.compile(r"epoch \d+/\d+: train loss [\d.]+, val loss [\d.]+, val top-1 [\d.]+% \(\d+ images\)")
# Every sample of the validation set counted once over all ranks.
VAL_IMAGES = 333
# Arguments that make one rank fail after it has joined the group, and the line it then prints.
FAILING_ARGS = ["--data", "/nonexistent"]
FAILURE = re.compile(r"ddp_minimal: error: .*/nonexistent")


def program():
    """The training program, from the build directory."""
    return os.path.join(os.path.dirname(dptrain()), "ddp_minimal")


def command(*extra):
    return [program(), *ARGS, *extra]


def world_line(processes):
    """The line rank 0 prints when it has joined a group of `processes`."""
    return f"ddp_minimal: {processes} process(es)"


def results(output):
    """Rank 0's result lines, without the throughput (which differs from run to run)."""
    return RESULT.findall(output)


def launch_reference():
    """The same training under `dptrain launch` with 2 processes: what every launcher must reproduce."""
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", *command()]

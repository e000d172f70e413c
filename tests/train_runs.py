"""Helpers for the tests that run `dptrain train` and `dptrain eval`."""

import json
import re
from typing import NamedTuple

from proc import dptrain, env_with, free_port, run


# The short resumable run of the recovery tests (test_train_faults, test_slurm, bench/faults):
# ResNet-20 on 32 px synthetic images, 384 training images over 2 ranks, batch 16 per rank, so 12
# steps per epoch and 24 in all, --resume auto with a checkpoint every 4 steps. Steps long enough
# (tens of ms) that a kill lands within a step of the progress line it follows, and 401 validation
# images keep validation long enough to be hit.
SMALL = ["--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-train-size", "384", "--dummy-val-size", "401",
         "-b", "16", "-j", "1", "--lr", "0.2", "--seed", "5", "--deterministic", "--epochs", "2", "-p", "1",
         "--resume", "auto", "--checkpoint-every", "4"]
STEPS = 24


def alone():
    """The environment of a single-process run: its own rendezvous port, so tests running side by
    side do not collide on the default one."""
    return env_with(MASTER_PORT=free_port())


def last_json(out):
    """The JSON line rank 0 ends with (under `dptrain launch`, after its "[rank 0] " prefix)."""
    return json.loads(re.sub(r"^\[rank \d+\] ", "", out.strip().splitlines()[-1]))


def trained_by_epoch(sample_log, ranks, lost):
    """{epoch: [index, ...]} that a run's --sample-log files (`sample_log` as given to the flag, one
    file per rank of `ranks`) say were trained, where rank `lost` (or each of several) was lost and the others went on
    (--on-failure continue). A step marked dropped was not trained: the line before its mark in the
    file that marks it, and the lost process's line of that step, its last (before a replacement's
    "joined" line, or at the end of the lost rank's file). A line cut short by a kill is not
    counted. Returns also the dropped steps."""
    lost = {lost} if isinstance(lost, int) else set(lost)
    processes_by_rank, dropped = {}, set()
    for rank in ranks:
        processes = [[]]  # each process's kept lines: a replacement's follow the lost one's
        with open(sample_log.replace(".txt", f".rank{rank}.txt")) as f:
            for line in f:
                if not line.endswith("\n"):
                    continue
                fields = line.split()
                kept = processes[-1]
                if fields[0] == "dropped":
                    dropped.add(int(fields[1]))
                    if kept and int(kept[-1][0]) == int(fields[1]):
                        kept.pop()
                elif fields[0] == "joined":
                    processes.append([])
                else:
                    kept.append(fields)
        processes_by_rank[rank] = processes
    epochs = {}
    for rank, processes in processes_by_rank.items():
        for number, lines in enumerate(processes):
            was_lost = number < len(processes) - 1 or (rank in lost and len(processes) == 1)
            for at, fields in enumerate(lines):
                if not (was_lost and at == len(lines) - 1 and int(fields[0]) in dropped):
                    epochs.setdefault(int(fields[1]), []).extend(int(i) for i in fields[2:])
    return epochs, dropped


def each_once(epochs, samples, processes):
    """Whether `epochs` ({epoch: [index, ...]}, as trained_by_epoch gives) trained every one of
    `samples` samples in each epoch once, but for the fewer than `processes` that the sampler repeats
    to give the processes equal shares of an epoch re-dealt at another world size (its stated rule,
    DistributedSampler's padding)."""
    return all(set(indices) == set(range(samples)) and 0 <= len(indices) - samples < processes
               for indices in epochs.values())


def train_two_ranks(*args, arch="resnet20"):
    """`dptrain train -a arch ARGS` on 2 processes under the launcher (the learning tests' runs);
    returns its output and rank 0's JSON line, or fails with the output."""
    code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                          "-a", arch, "-j", "1", "-p", "1000", *args], timeout=280)
    if code != 0:
        raise AssertionError(out + err)
    return out, last_json(out)


class Comparison(NamedTuple):
    """Two checkpoints side by side (compare_checkpoints)."""
    positions: str  # each one's global step, epoch and step in epoch: "8 1 2 8 1 2"
    max_abs_diff: float  # the weights' largest difference
    bitwise: bool  # the weights bitwise equal
    optimizer_bitwise: bool  # the optimizer's state (momentum, moments, step counts) bitwise equal
    entries: int  # the optimizer state's entries, those of the first


def identical(positions, entries=59):
    """The comparison of two checkpoints equal to the bit at these positions (59 entries: the
    ResNet-20 of the recovery runs)."""
    return Comparison(positions, 0.0, True, True, entries)


def compare_checkpoints(a, b):
    """Two checkpoint files side by side, compared in this process, which runs under PYTHON
    (torch): a Python per comparison cost 2-3 CPU seconds to start."""
    import torch  # here: the tests that never compare do not pay for loading it
    x, y = torch.load(a), torch.load(b)
    positions = " ".join(str(c[k]) for c in (x, y) for k in ("global_step", "epoch", "step_in_epoch"))
    assert list(x["state_dict"]) == list(y["state_dict"]), (a, b)
    weights = x["state_dict"].items()
    diff = max((t.double() - y["state_dict"][k].double()).abs().max().item() for k, t in weights)
    same = all(torch.equal(t, y["state_dict"][k]) for k, t in weights)
    sa, sb = x["optimizer"]["state"], y["optimizer"]["state"]

    def equal(u, v):
        return torch.equal(u, v) if torch.is_tensor(u) else u == v
    same_state = sorted(sa) == sorted(sb) and all(
        sorted(sa[i]) == sorted(sb[i]) and all(equal(v, sb[i][k]) for k, v in sa[i].items()) for i in sa)
    return Comparison(positions, diff, same, same_state, len(sa))

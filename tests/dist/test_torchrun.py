"""Training under PyTorch's own launcher, torchrun (`torch.distributed.run --no_python`). With
torchrun's defaults (and with --standalone since torch 2.x) its agent hosts the rendezvous store on
MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True): every worker must join it as a client, each
restart round under a key prefix of its own, where rank 0 listening on that port itself would find
it busy. The result must be exactly what the same training prints under `dptrain launch`, and a
round that failed must give way to a restarted one (--max_restarts) that trains as if nothing had
happened."""

import os
import re
import subprocess
import unittest

import small_training
from proc import PYTHON, cannot_run, env_with, free_port, run

BOUND = 150
# torchrun itself, made to run on Debian's torch 2.x (see the file).
TORCHRUN = [PYTHON, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "torchrun.py")]
# Debian 12's torchrun (torch 1.13 on Python 3.11) cannot use its own --redirects and --tee
# defaults ("0" matches no member of the flag enum under 3.11) and stops before starting anyone:
# naming both avoids that. --tee 1 copies each worker's stdout, tagged "[default<local rank>]:",
# into torchrun's. Underscored option names: torch 1.13 knows no others.
OPTIONS = ["--nproc_per_node", "2", "--redirects", "1", "--tee", "1", "--no_python"]
# Same intra-op threads under every launcher, so that the floating-point results match exactly.
THREADS = {"OMP_NUM_THREADS": "1"}


def torchrun_env(**overrides):
    # No identity from an enclosing launcher or job: the variables torchrun sets must be the ones used.
    clear = {name: None for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                     "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")}
    return env_with(**{**clear, **THREADS, **overrides})


def rank0_results(out):
    """Result lines torchrun attributes to local rank 0, and any from the other rank."""
    tagged = re.findall(r"^\[default(\d+)\]:(.*)$", out, re.MULTILINE)
    found = {rank: [small_training.RESULT.search(line).group(0) for r, line in tagged
                    if r == rank and small_training.RESULT.search(line)] for rank in ("0", "1")}
    return found["0"], found["1"]


class Torchrun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        probe = subprocess.run([*TORCHRUN, "--help"], capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            cannot_run(f"torchrun does not start: {probe.stderr[-500:]}")
        code, out, err = run(small_training.launch_reference(), timeout=BOUND, env=torchrun_env())
        assert code == 0, f"the reference run under dptrain launch failed:\n{out}\n{err}"
        cls.reference = small_training.results(out)
        assert len(cls.reference) == 1, out

    def torchrun(self, *args):
        return run([*TORCHRUN, *args], timeout=BOUND, env=torchrun_env())

    def assert_same_training(self, code, out, err):
        small_training.assert_same_training(self, self.reference, code, out, err, rank0_results(out))

    def test_trains_as_under_dptrain_launch_with_torchruns_defaults(self):
        # The static rendezvous: the agent listens on --master_port (the store the workers share).
        code, out, err = self.torchrun("--master_port", str(free_port()), *OPTIONS, *small_training.command())
        self.assert_same_training(code, out, err)

    def test_trains_as_under_dptrain_launch_standalone(self):
        # The c10d rendezvous on a port torchrun picks: shared with the workers since torch 2.x,
        # a store of their own (rank 0's) before.
        code, out, err = self.torchrun("--standalone", *OPTIONS, *small_training.command())
        self.assert_same_training(code, out, err)

    def test_a_failed_round_is_restarted_and_trains_as_if_nothing_had_happened(self):
        # Round 0: rank 1 stops at its arguments (an unknown model) while rank 0 joins the store and
        # waits; torchrun ends the round and starts round 1, whose ranks find round 0's keys under
        # another prefix.
        failing = " ".join(small_training.FAILING_ARGS)
        script = (f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exec "$0" "$@" {failing}; '
                  'else exec "$0" "$@"; fi')
        code, out, err = self.torchrun("--master_port", str(free_port()), "--max_restarts", "1", *OPTIONS, "sh", "-c",
                                       script, *small_training.command())
        self.assert_same_training(code, out, err)
        self.assertEqual(len(small_training.FAILURE.findall(out + err)), 1, out + err)


if __name__ == "__main__":
    unittest.main()

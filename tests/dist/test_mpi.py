"""Training under OpenMPI's mpirun: rank, size and local rank come from OMPI_COMM_WORLD_*, the
master from MASTER_PORT (address defaulting to this host) or from --dist-url. The result must be
exactly what the same training prints under `dptrain launch`; a failing rank must end the job."""

import os
import re
import shutil
import unittest

import small_training
from proc import cannot_run, env_with, free_port, run, wait_dead

BOUND = 150
# Same intra-op threads under every launcher, so that the floating-point results match exactly.
THREADS = {"OMP_NUM_THREADS": "1"}


def mpirun(*args):
    """mpirun for a container: root allowed, no hardware transports, no slot count checks."""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["mpirun", *root, "--oversubscribe", "--mca", "btl", "self,tcp", "--tag-output", *args]


def mpi_env(**overrides):
    # No identity from an enclosing launcher or job: the variables mpirun sets must be the ones used.
    clear = {k: None for k in os.environ if k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    clear.update(RANK=None, WORLD_SIZE=None, LOCAL_RANK=None, MASTER_ADDR=None, MASTER_PORT=None)
    return env_with(**{**clear, **THREADS, **overrides})


def rank0_results(out):
    """Result lines mpirun --tag-output attributes to rank 0's stdout, and any from other ranks."""
    tagged = re.findall(r"^\[1,(\d+)\]<stdout>:(.*)$", out, re.MULTILINE)
    ours = [line for rank, line in tagged if rank == "0" and small_training.RESULT.search(line)]
    others = [line for rank, line in tagged if rank != "0" and small_training.RESULT.search(line)]
    return [small_training.RESULT.search(line).group(0) for line in ours], others


class Mpi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if shutil.which("mpirun") is None:
            cannot_run("OpenMPI's mpirun is not installed (scripts/install-deps installs it)")
        code, out, err = run(small_training.launch_reference(), timeout=BOUND, env=mpi_env())
        assert code == 0, f"the reference run under dptrain launch failed:\n{out}\n{err}"
        cls.reference = small_training.results(out)
        assert len(cls.reference) == 1, out

    def assert_same_training(self, code, out, err):
        small_training.assert_same_training(self, self.reference, code, out, err, rank0_results(out))

    def test_master_port_from_the_environment_and_address_defaulting_to_this_host(self):
        code, out, err = run(mpirun("-np", "2", *small_training.command()), timeout=BOUND,
                             env=mpi_env(MASTER_PORT=free_port()))
        self.assert_same_training(code, out, err)

    def test_master_from_dist_url(self):
        url = f"tcp://127.0.0.1:{free_port()}"
        code, out, err = run(mpirun("-np", "2", *small_training.command("--dist-url", url)), timeout=BOUND,
                             env=mpi_env())
        self.assert_same_training(code, out, err)

    def test_a_failing_rank_ends_the_job_with_a_nonzero_code(self):
        # Rank 1 stops at its arguments (an unknown model), before joining the group. Rank 0 then
        # waits at the rendezvous until mpirun, seeing a rank fail, ends it: well before rank 0's
        # 60 s timeout, with both ranks gone.
        failing = " ".join(small_training.FAILING_ARGS)
        script = (f'echo "pid $$"; if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$0" "$@" {failing}; '
                  'else exec "$0" "$@"; fi')
        code, out, err = run(mpirun("-np", "2", "sh", "-c", script, *small_training.command()), timeout=50,
                             env=mpi_env(MASTER_PORT=free_port()))
        self.assertNotEqual(code, 0, out + err)
        # Open MPI 4 (Debian 12) writes "<stderr>:text", Open MPI 5 (Debian 13) "<stderr>: text".
        self.assertRegex(out + err, r"\[1,1\]<stderr>: ?" + small_training.FAILURE.pattern)
        pids = [int(p) for p in re.findall(r"<stdout>: ?pid (\d+)", out)]
        self.assertEqual(len(pids), 2, out)
        self.assertTrue(wait_dead(pids, 10), f"ranks {pids} outlived mpirun")


if __name__ == "__main__":
    unittest.main()

"""Training under a real Slurm: a one-node cluster (munged, slurmctld, slurmd) started by the test,
`srun -N1 -n2 PROGRAM` with no distributed flags at all, the same with a file:// rendezvous, and
examples/slurm.sbatch submitted with `sbatch --wait`. Each must print exactly the numbers the same
training prints under `dptrain launch`. Skips, with the daemons' last log lines, only when the
daemons cannot start here."""

import os
import shutil
import tempfile
import unittest

import small_training
from local_slurm import ClusterUnavailable, LocalSlurm
from proc import cannot_run, env_with, run

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# srun waits forever for resources it cannot get: every client command is bounded by this.
BOUND = 150
# Same intra-op threads under every launcher, so that the floating-point results match exactly.
THREADS = {"OMP_NUM_THREADS": "1"}


class Slurm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dpt-slurm-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, ignore_errors=True)
        cls.cluster = LocalSlurm(cls.dir)
        cls.addClassCleanup(cls.cluster.stop)
        try:
            cls.cluster.start()
        except ClusterUnavailable as e:
            cannot_run(f"the local Slurm daemons could not start: {e}")
        code, out, err = run(small_training.launch_reference(), timeout=BOUND,
                             env=env_with(**THREADS, MASTER_PORT=None, MASTER_ADDR=None))
        assert code == 0, f"the reference run under dptrain launch failed:\n{out}\n{err}"
        cls.reference = small_training.results(out)
        assert len(cls.reference) == 1, out

    def assert_same_training(self, code, out, err):
        self.assertEqual(code, 0, f"stdout:\n{out}\nstderr:\n{err}\n{self.cluster.log_tails()}")
        # One group of two: a failed Slurm detection would start two groups of one instead.
        self.assertEqual(out.count(small_training.world_line(2)), 1, out)
        self.assertNotIn(small_training.world_line(1), out)
        self.assertEqual(small_training.results(out), self.reference, out)
        self.assertEqual(small_training.val_images(small_training.results(out)[0]), small_training.VAL_IMAGES)

    def test_srun_trains_with_no_distributed_flags(self):
        code, out, err = self.cluster.run(["srun", "-N1", "-n2", *small_training.command()], timeout=BOUND,
                                          env=self.cluster.env(**THREADS))
        self.assert_same_training(code, out, err)

    def test_srun_with_a_file_rendezvous(self):
        rdzv = os.path.join(self.dir, "rdzv")
        code, out, err = self.cluster.run(
            ["srun", "-N1", "-n2", *small_training.command("--dist-url", f"file://{rdzv}")], timeout=BOUND,
            env=self.cluster.env(**THREADS))
        self.assert_same_training(code, out, err)

    def test_the_example_sbatch_script_with_a_small_setting(self):
        output = os.path.join(self.dir, "job.out")
        # The #SBATCH lines describe a 2 x 4 GPU job; the command line scales it to this node.
        code, out, err = self.cluster.run(
            ["sbatch", "--wait", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-node=0",
             "--time=5", f"--output={output}", os.path.join(REPO, "examples", "slurm.sbatch"),
             *small_training.ARGS],
            timeout=BOUND, env=self.cluster.env(**THREADS, PROGRAM=" ".join(small_training.argv())), cwd=self.dir)
        with open(output) if os.path.exists(output) else open(os.devnull) as f:
            job_out = f.read()
        self.assertIn("Submitted batch job", out)
        self.assert_same_training(code, job_out, err)


if __name__ == "__main__":
    unittest.main()

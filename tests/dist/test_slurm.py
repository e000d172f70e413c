"""Training under a real Slurm: a one-node cluster (munged, slurmctld, slurmd) started by the test,
`srun -N1 -n2 PROGRAM` with no distributed flags at all, the same with a file:// rendezvous, and
examples/slurm.sbatch submitted with `sbatch --wait`. Each must print exactly the numbers the same
training prints under `dptrain launch`. A job submitted with --requeue and signalled mid-epoch
(as Slurm's --signal=USR1@90 would) requeues itself and ends bitwise equal to an uninterrupted run. Skips, with the daemons' last log lines, only when the
daemons cannot start here."""

import datetime
import os
import re
import shutil
import tempfile
import time
import unittest

import small_training
from local_slurm import ClusterUnavailable, LocalSlurm
from proc import cannot_run, dptrain, env_with, run
from train_runs import SMALL, STEPS, compare_checkpoints, identical, last_json

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

    def job_field(self, job, field):
        code, out, _ = self.cluster.run(["scontrol", "show", "job", job], timeout=30)
        found = re.search(rf"\b{field}=(\S+)", out) if code == 0 else None
        return found.group(1) if found else None

    def wait_for(self, what, predicate, timeout=BOUND):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        self.fail(f"timed out waiting for {what}\n{self.cluster.log_tails()}")

    def test_a_preempted_job_requeues_itself_and_continues_exactly(self):
        reference = os.path.join(self.dir, "requeue_reference")
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                              *SMALL, "--output", reference], timeout=BOUND, env=env_with(MASTER_PORT=None))
        self.assertEqual(code, 0, out + err)
        output, log = os.path.join(self.dir, "requeue_run"), os.path.join(self.dir, "requeue.out")
        script = os.path.join(self.dir, "requeue.sbatch")
        with open(script, "w") as f:
            f.write("#!/bin/bash\necho \"start ${SLURM_RESTART_COUNT:-0}\"\n"
                    f"srun --kill-on-bad-exit=1 {dptrain()} train {' '.join(SMALL)} --requeue --output {output}\n")
        code, out, err = self.cluster.run(
            ["sbatch", "--parsable", "--requeue", "--open-mode=append", "--nodes=1", "--ntasks-per-node=2",
             "--cpus-per-task=1", "--gpus-per-node=0", "--time=5", f"--output={log}", script],
            timeout=BOUND, env=self.cluster.env(**THREADS), cwd=self.dir)
        self.assertEqual(code, 0, out + err)
        job = out.strip().split(";")[0]
        self.addCleanup(self.cluster.run, ["scancel", job], timeout=30)

        def job_log():
            with open(log) if os.path.exists(log) else open(os.devnull) as f:
                return f.read()

        self.wait_for("step 6 of the first start", lambda: re.search(r"Epoch: \[0\]\[ ?6/12\]", job_log()))
        code, out, err = self.cluster.run(["scancel", "--signal=USR1", job], timeout=30)
        self.assertEqual(code, 0, out + err)
        self.wait_for("the job to be requeued", lambda: self.job_field(job, "Restarts") == "1")

        def started_again():
            # Slurm holds a requeued batch job for about two minutes (its BeginTime) before it may
            # start again; the test brings the start forward, as often as the requeue resets that
            # time, to a few seconds from now: slurmd revokes the first run's credential with a
            # resolution of seconds, and refuses ("Job credential revoked") a start within the
            # second the requeue ended the first run, which ends the job for good.
            state = self.job_field(job, "JobState")
            begin = self.job_field(job, "StartTime")
            held = begin not in (None, "Unknown", "None") and datetime.datetime.strptime(
                begin, "%Y-%m-%dT%H:%M:%S") > datetime.datetime.now() + datetime.timedelta(seconds=10)
            if state == "PENDING" and held:
                self.cluster.run(["scontrol", "update", f"JobId={job}", "StartTime=now+3"], timeout=30)
            return state in ("RUNNING", "COMPLETED")  # not COMPLETING: the first run ending

        self.wait_for("the requeued job to start", started_again)
        self.wait_for("the requeued job to finish", lambda: self.job_field(job, "JobState") == "COMPLETED")
        text = job_log()
        self.assertIn("start 0", text)
        self.assertIn("start 1", text)
        stop = re.search(r"stopping on request after global step (\d+)", text)
        self.assertIsNotNone(stop, text)
        self.assertIn(f"requeueing Slurm job {job} (scontrol requeue); its next start continues from the checkpoint",
                      text)
        self.assertRegex(text, rf"resuming from .*checkpoint\.pt \(epoch 0, step {stop.group(1)} of it")
        self.assertEqual(last_json(text)["global_step"], STEPS)
        comparison = compare_checkpoints(os.path.join(reference, "checkpoint.pt"),
                                         os.path.join(output, "checkpoint.pt"))
        self.assertEqual(comparison, identical(comparison.positions))


if __name__ == "__main__":
    unittest.main()

"""dpt::launch::spawn with real processes: the workers re-run the program and get the torchrun
environment, a failing worker is named and the others are stopped, Ctrl-C and a killed parent
leave no survivor, and a CUDA_VISIBLE_DEVICES subset on a machine without GPUs keeps the CPU path
(where 2 workers train a ResNet-20 with DDP)."""

import os
import re
import signal
import unittest

from proc import Started, env_with, pid_alive, pids_in, program, run, wait_dead, wait_for_pids


def probe(*args):
    return [program("dptrain_spawn_probe"), *args]


NO_GPU = env_with(CUDA_VISIBLE_DEVICES="")  # the same answer on a machine with GPUs


class Workers(unittest.TestCase):
    def test_each_worker_reruns_main_and_runs_the_function_with_the_torchrun_environment(self):
        code, out, err = run(probe("--nprocs", "2"), timeout=60, env=NO_GPU)
        self.assertEqual(code, 0, out + err)
        port = re.search(r"spawn: 2 worker\(s\), no GPU visible; rendezvous tcp://127\.0\.0\.1:(\d+)", err)
        self.assertIsNotNone(port, err)
        for rank in range(2):
            main = re.search(rf"\[rank {rank}\] main\(\) in pid (\d+)", out)
            work = re.search(rf"\[rank {rank}\] PID (\d+) local_rank {rank} RANK {rank} LOCAL_RANK {rank} "
                             r"WORLD_SIZE 2 MASTER 127\.0\.0\.1:(\d+) CUDA_VISIBLE_DEVICES  marker unset args 3", out)
            self.assertIsNotNone(main, out)
            self.assertIsNotNone(work, out)
            self.assertEqual(main.group(1), work.group(1))  # main() ran again in the worker itself
            self.assertEqual(work.group(2), port.group(1))
        # Only the parent comes back from spawn(): a worker exits when its function returns.
        parent = re.findall(r"^spawn returned 0 in pid (\d+)$", out, re.M)
        self.assertEqual(len(parent), 1, out)
        self.assertIn(f"main() in pid {parent[0]}\n", out)
        self.assertNotIn("] spawn returned", out)

    def test_one_worker_per_visible_gpu_by_default_sharing_the_variable_unchanged(self):
        # No GPU here: spawn only counts the entries; local rank i would use cuda:i.
        code, out, err = run(probe("--nprocs", "0"), timeout=60, env=env_with(CUDA_VISIBLE_DEVICES="1,3"))
        self.assertEqual(code, 0, out + err)
        self.assertIn("spawn: 2 worker(s), GPUs visible to them: 1,3 (local rank i uses cuda:i)", err)
        self.assertIn("WORLD_SIZE 2 MASTER", out)
        for rank in range(2):
            self.assertRegex(out, rf"\[rank {rank}\] PID \d+ local_rank {rank} .* CUDA_VISIBLE_DEVICES 1,3 marker")

    def test_without_gpus_the_process_count_must_be_given(self):
        code, out, err = run(probe("--nprocs", "0"), timeout=60, env=NO_GPU)
        self.assertEqual(code, 2, out + err)
        self.assertIn("spawn_probe: error: spawn: no GPU is visible to start one worker per GPU; give the number of "
                      "processes (nprocs)", err)
        self.assertNotIn("[rank", out)


def run_failing_probe(*args):
    """Runs the probe until it exits (bounded); returns its code, output and the worker PIDs it
    printed. The workers are killed by PID if the supervision under test left any behind."""
    started = Started(probe(*args), env=NO_GPU)
    try:
        code, out, err = started.wait(timeout=60)
        pids = pids_in(out)
        started.extra_pids += pids
    finally:
        started.close()
    return code, out, err, pids


class Supervision(unittest.TestCase):
    def test_a_failing_worker_is_named_with_its_code_and_the_others_are_stopped(self):
        code, out, err, pids = run_failing_probe("--nprocs", "3", "--fail-rank", "1", "--sleep", "60")
        self.assertEqual(code, 3, out + err)
        self.assertEqual(len(pids), 3, out)
        self.assertTrue(wait_dead(pids, 5), f"left alive: {[p for p in pids if pid_alive(p)]}")
        failed = re.search(r"spawn: rank 1 \(pid (\d+)\) failed first: it exited with code 3 after [\d.]+ s; "
                           r"the other workers were stopped\. Its last 3 line\(s\):", err)
        self.assertIsNotNone(failed, err)
        self.assertIn(f"[rank 1] PID {failed.group(1)} local_rank 1", out)
        self.assertIn("    about to fail: the disk is full", err)
        self.assertIn("spawn returned 3 in pid", out)

    def test_an_exception_in_a_worker_is_printed_with_its_rank_and_fails_it(self):
        code, out, err, pids = run_failing_probe("--nprocs", "2", "--throw-rank", "0", "--sleep", "60")
        self.assertEqual(code, 1, out + err)
        self.assertTrue(wait_dead(pids, 5), f"left alive: {[p for p in pids if pid_alive(p)]}")
        self.assertRegex(err, r"spawn: rank 0 \(pid \d+\) failed first: it exited with code 1")
        self.assertIn("[rank 0] rank 0: no space left on device", err)

    def test_ctrl_c_stops_every_worker_and_exits_130(self):
        started = Started(probe("--nprocs", "2", "--sleep", "60"), env=NO_GPU)
        try:
            pids = wait_for_pids(started, 2)
            started.proc.send_signal(signal.SIGINT)  # the parent only, as a terminal's Ctrl-C reaches it
            code, out, err = started.wait(timeout=30)
        finally:
            started.close()
        self.assertEqual(code, 130, out + err)
        self.assertIn("spawn: interrupted by signal 2", err)
        self.assertIn("spawn returned 130 in pid", out)
        self.assertTrue(wait_dead(pids, 5), f"left alive: {[p for p in pids if pid_alive(p)]}")

    def test_a_killed_parent_leaves_no_orphans(self):
        started = Started(probe("--nprocs", "2", "--sleep", "60"), env=NO_GPU)
        try:
            pids = wait_for_pids(started, 2)
            os.kill(started.proc.pid, signal.SIGKILL)
            started.proc.wait(timeout=10)
            self.assertTrue(wait_dead(pids, 5), f"orphans: {[p for p in pids if pid_alive(p)]}")
        finally:
            started.close()


class CpuPathWithAGpuSubsetSet(unittest.TestCase):
    def test_two_workers_train_on_the_cpu_and_exit_0(self):
        # A short run (examples' test checks that it learns): the rendezvous, DDP and the exact
        # validation count must work with the variable set and no GPU present.
        code, out, err = run([program("spawn"), "--nprocs", "2", "--epochs", "1", "--train-size", "256",
                              "--val-size", "99", "--timeout", "120"],
                             timeout=200, env=env_with(CUDA_VISIBLE_DEVICES="1,3"))
        self.assertEqual(code, 0, out + err)
        self.assertIn("spawn: 2 worker(s), GPUs visible to them: 1,3 (local rank i uses cuda:i)", err)
        self.assertRegex(out, r"\[rank 0\] spawn: rendezvous tcp://127\.0\.0\.1:\d+, rank 0 on cpu")
        self.assertIn("[rank 0] spawn: 2 process(es), batch 64 per process (128 global), 256 training images", out)
        self.assertRegex(out, r"\[rank 0\] epoch 1/1: train loss [\d.]+, val loss [\d.]+, val top-1 [\d.]+% "
                              r"\(99 images\)")


if __name__ == "__main__":
    unittest.main()

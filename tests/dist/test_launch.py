"""`dptrain launch` with real processes: the torchrun environment, collectives on 2 and 4 ranks,
supervision (a failing rank, Ctrl-C, SIGKILL of the launcher), restarts and log files."""

import json
import os
import re
import signal
import tempfile
import time
import unittest

from proc import PYTHON, Started, cannot_run, dptrain, env_with, pid_alive, pids_in, run, wait_dead, wait_for_pids

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(name):
    return os.path.join(HERE, "workers", name)


def launch(*args):
    return [dptrain(), "launch", "--standalone", *args]


def usable_cpus():
    return sorted(os.sched_getaffinity(0))


def cpu_blocks(workers):
    """The launcher's split of this process's CPUs: contiguous blocks, the first ones larger by one
    where they do not divide evenly; none when there are fewer CPUs than workers."""
    cpus = usable_cpus()
    if len(cpus) < workers:
        return []
    share, extra = divmod(len(cpus), workers)
    blocks, start = [], 0
    for w in range(workers):
        size = share + (1 if w < extra else 0)
        blocks.append(cpus[start:start + size])
        start += size
    return blocks


class CollectivesThroughTheLauncher(unittest.TestCase):
    def check_world(self, n, transport="gloo + shared memory", env=None):
        code, out, err = run(launch("--nproc-per-node", str(n), "--", dptrain(), "check", "--timeout", "60"),
                             timeout=120, env=env)
        self.assertEqual(code, 0, err)
        for r in range(n):
            self.assertIn(f"[rank {r}] rank {r}/{n}: 11 collectives correct on {transport} (", out)
        json_lines = [l.split("] ", 1)[1] for l in out.splitlines() if l.startswith("[rank 0] {")]
        self.assertEqual(len(json_lines), 1, out)
        report = json.loads(json_lines[0])
        self.assertEqual(report["world_size"], n)
        self.assertEqual(report["transport"], transport)
        self.assertTrue(report["passed"])

    def test_two_ranks(self):
        self.check_world(2)

    def test_four_ranks(self):
        self.check_world(4)

    def test_gloo_alone_when_shared_memory_is_turned_off(self):
        self.check_world(2, "gloo", env_with(DPTRAIN_SHM="0"))

    def test_plain_pytorch_gloo_script(self):
        code, out, err = run(launch("--nproc-per-node", "2", "--", PYTHON, worker("torch_gloo.py")), timeout=120)
        self.assertEqual(code, 0, out + err)
        self.assertIn("[rank 0] torch rank 0/2 ok sum=3", out)
        self.assertIn("[rank 1] torch rank 1/2 ok sum=3", out)


class CpuPlacement(unittest.TestCase):
    """Each worker pinned to its own block of the launcher's CPUs, unless told otherwise."""

    def allowed(self, *args):
        code, out, err = run(launch(*args, "--", "grep", "Cpus_allowed_list", "/proc/self/status"), timeout=60)
        self.assertEqual(code, 0, out + err)
        allowed = {}
        for line in out.splitlines():
            m = re.match(r"\[rank (\d+)\] Cpus_allowed_list:\s*(\S+)", line)
            if m:
                cpus = []
                for part in m.group(2).split(","):
                    first, _, last = part.partition("-")
                    cpus.extend(range(int(first), int(last or first) + 1))
                allowed[int(m.group(1))] = cpus
        return allowed, err

    def test_workers_get_disjoint_blocks(self):
        if len(usable_cpus()) < 2:
            cannot_run("needs 2 CPUs")
        allowed, err = self.allowed("--nproc-per-node", "2")
        self.assertEqual(allowed, dict(enumerate(cpu_blocks(2))))
        self.assertIn("worker CPUs (local rank order): ", err)

    def test_none_leaves_them_every_cpu(self):
        allowed, _ = self.allowed("--nproc-per-node", "2", "--cpu-bind", "none")
        self.assertEqual(allowed, {0: usable_cpus(), 1: usable_cpus()})

    def test_more_workers_than_cpus_are_not_pinned(self):
        workers = len(usable_cpus()) + 1
        allowed, err = self.allowed("--nproc-per-node", str(workers))
        self.assertEqual(allowed, {r: usable_cpus() for r in range(workers)})
        self.assertIn("fewer CPUs than workers, so the workers are not pinned", err)


class TorchrunEnvironment(unittest.TestCase):
    def test_contract(self):
        code, out, err = run(launch("--nproc-per-node", "2", "--gpus", "3,1", "--max-restarts", "2", "--run-id",
                                    "job42", "--", PYTHON, worker("report_env.py")),
                             timeout=60, env=env_with(OMP_NUM_THREADS=None))
        self.assertEqual(code, 0, err)
        envs = {}
        for line in out.splitlines():
            m = re.match(r"\[rank (\d+)\] ENV (.*)", line)
            if m:
                envs[int(m.group(1))] = json.loads(m.group(2))
        self.assertEqual(sorted(envs), [0, 1])
        blocks = cpu_blocks(2)
        for r, gpu in [(0, "3"), (1, "1")]:
            e = envs[r]
            self.assertEqual(e["RANK"], str(r))
            self.assertEqual(e["LOCAL_RANK"], str(r))
            self.assertEqual(e["WORLD_SIZE"], "2")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "2")
            self.assertEqual(e["GROUP_RANK"], "0")
            self.assertEqual(e["GROUP_WORLD_SIZE"], "1")
            self.assertEqual(e["ROLE_RANK"], str(r))
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            self.assertTrue(e["MASTER_PORT"].isdigit())
            self.assertEqual(e["TORCHELASTIC_RESTART_COUNT"], "0")
            self.assertEqual(e["TORCHELASTIC_MAX_RESTARTS"], "2")
            self.assertEqual(e["TORCHELASTIC_RUN_ID"], "job42")
            self.assertEqual(e["OMP_NUM_THREADS"], str(len(blocks[r]) if blocks else max(1, len(usable_cpus()) // 2)))
            self.assertEqual(e["CUDA_VISIBLE_DEVICES"], gpu)

    def test_user_omp_setting_is_kept(self):
        code, out, _ = run(launch("--nproc-per-node", "1", "--", PYTHON, worker("report_env.py")), timeout=60,
                           env=env_with(OMP_NUM_THREADS=7))
        self.assertEqual(code, 0)
        self.assertIn('"OMP_NUM_THREADS": "7"', out)

    def test_gpu_list_must_match_worker_count(self):
        code, _, err = run(launch("--nproc-per-node", "3", "--gpus", "1,3", "--", "true"), timeout=30)
        self.assertEqual(code, 2)
        self.assertIn("--gpus lists 2 GPU(s) but --nproc-per-node is 3", err)

    def test_seconds_that_fit_no_clock_are_refused(self):
        # The same conversion to integer milliseconds as train's --dist-timeout, undefined for these.
        for flag, seconds in [("--grace-period", "1e300"), ("--rdzv-last-call", "nan")]:
            with self.subTest(flag=flag):
                code, _, err = run(launch("--nproc-per-node", "1", flag, seconds, "--", "true"), timeout=30)
                self.assertEqual(code, 2)
                self.assertIn(f"dptrain: error: {flag} takes seconds from 0 to 1e+09, got {float(seconds):g}", err)

    def test_no_program_is_refused_before_anything_is_printed(self):
        # The banner (workers, master, run id) came first, then the error, as if a job had started;
        # an elastic launch would have waited for its rendezvous first.
        for nnodes in ("1", "1:2"):
            with self.subTest(nnodes=nnodes):
                code, out, err = run([dptrain(), "launch", "--nnodes", nnodes, "--standalone", "--nproc-per-node", "2",
                                      "--"], timeout=30)
                self.assertEqual(code, 2, out + err)
                self.assertEqual((out, err), ("", "dptrain: error: no program to launch; put it after '--'\n"))

    def test_missing_program_is_named(self):
        code, _, err = run(launch("--nproc-per-node", "2", "--", "no-such-program-xyz"), timeout=30)
        self.assertEqual(code, 2)
        self.assertIn("cannot run 'no-such-program-xyz' for rank 0: not found in PATH", err)


class Supervision(unittest.TestCase):
    def test_failing_rank_stops_the_others_and_is_reported(self):
        started = Started(launch("--nproc-per-node", "3", "--", PYTHON, worker("fail_or_sleep.py")),
                          env=env_with(FAIL_RANK=1, FAIL_CODE=3))
        try:
            t0 = time.monotonic()
            code, out, err = started.wait(timeout=60)
            elapsed = time.monotonic() - t0
            pids = pids_in(out)
            started.extra_pids += pids
        finally:
            started.close()
        self.assertEqual(code, 3, err)
        self.assertEqual(len(pids), 3, out)
        self.assertTrue(wait_dead(pids, 5), "a worker outlived the launcher")
        self.assertRegex(err, r"rank 1 \(pid \d+\) failed first: it exited with code 3")
        self.assertIn("about to fail: the disk is full", err)
        self.assertLess(elapsed, 30)  # torn down well within the grace period, not a hang

    def test_ctrl_c_reaches_every_worker_and_their_children(self):
        started = Started(launch("--nproc-per-node", "2", "--", PYTHON, worker("fail_or_sleep.py")),
                          env=env_with(SPAWN_CHILD=1))
        try:
            pids = wait_for_pids(started, 4)
            started.proc.send_signal(signal.SIGINT)
            code, _, err = started.wait(timeout=30)
        finally:
            started.close()
        self.assertEqual(code, 130)
        self.assertIn("interrupted by signal 2", err)
        self.assertTrue(wait_dead(pids, 5), f"left alive: {[p for p in pids if pid_alive(p)]}")

    def test_workers_that_ignore_sigterm_are_killed_after_the_grace_period(self):
        started = Started(launch("--nproc-per-node", "2", "--grace-period", "1", "--", PYTHON,
                                 worker("fail_or_sleep.py")),
                          env=env_with(IGNORE_TERM=1))
        try:
            pids = wait_for_pids(started, 2)
            started.proc.send_signal(signal.SIGTERM)
            code, _, _ = started.wait(timeout=30)
        finally:
            started.close()
        self.assertEqual(code, 128 + signal.SIGTERM)
        self.assertTrue(wait_dead(pids, 5))

    def test_workers_die_with_a_killed_launcher(self):
        started = Started(launch("--nproc-per-node", "2", "--", PYTHON, worker("fail_or_sleep.py")))
        try:
            pids = wait_for_pids(started, 2)
            os.kill(started.proc.pid, signal.SIGKILL)  # no chance to clean up: the kernel must
            started.proc.wait(timeout=10)
            self.assertTrue(wait_dead(pids, 5), f"orphans: {[p for p in pids if pid_alive(p)]}")
        finally:
            started.close()


class Restarts(unittest.TestCase):
    def test_group_restarts_until_success_with_the_count_exported(self):
        code, out, err = run(launch("--nproc-per-node", "2", "--max-restarts", "3", "--", PYTHON,
                                    worker("fail_until_restart.py")),
                             timeout=60, env=env_with(SUCCEED_AT=2))
        self.assertEqual(code, 0, err)
        # A failed attempt may stop its other rank before it prints; the last one runs to the end.
        for attempt in range(2):
            self.assertRegex(out, rf"\[rank (\d)\] attempt {attempt} of rank \1")
        for rank in range(2):
            self.assertIn(f"[rank {rank}] attempt 2 of rank {rank}", out)
        self.assertNotIn("attempt 3", out)
        self.assertEqual(err.count("restarting the local group"), 2)
        self.assertIn("(restart 2 of 3)", err)

    def test_gives_up_after_max_restarts_with_the_workers_code(self):
        code, out, err = run(launch("--nproc-per-node", "1", "--max-restarts", "1", "--", PYTHON,
                                    worker("fail_until_restart.py")),
                             timeout=60, env=env_with(SUCCEED_AT=5))
        self.assertEqual(code, 5)
        self.assertIn("giving up after 1 restart(s)", err)
        self.assertEqual(out.count("attempt"), 2)


class Replacements(unittest.TestCase):
    """--on-failure continue: a worker that fails is replaced in its place, within --max-restarts,
    while the others run on; the replacement is told it is one. (What it joins: train.test_train_faults.)"""

    # Rank 1 fails at once unless it is a replacement; every worker says how it was started.
    SCRIPT = ('echo "rank $RANK replacement=${DPTRAIN_REPLACEMENT:-0}"; '
              'if [ "$RANK" = 1 ] && [ -z "$DPTRAIN_REPLACEMENT" ]; then exit 3; fi; sleep 0.5')

    def run_replacing(self, restarts, log_dir=None):
        logs = ["--log-dir", log_dir] if log_dir else []
        return run(launch("--nproc-per-node", "2", "--on-failure", "continue", "--max-restarts", str(restarts),
                          *logs, "--", "sh", "-c", self.SCRIPT), timeout=60)

    def test_a_failed_worker_is_replaced_in_its_place_and_the_job_succeeds(self):
        with tempfile.TemporaryDirectory() as logs:
            code, out, err = self.run_replacing(1, logs)
            self.assertEqual(code, 0, out + err)
            self.assertRegex(err, r"rank 1 \(pid \d+\) exited with status 3; the other workers go on without it")
            self.assertIn("starting a replacement for rank 1 (1 of 1), to join the workers that went on", err)
            self.assertNotIn("restarting the local group", err)
            with open(os.path.join(logs, "attempt_0", "rank_1.log")) as f:  # the replacement's follows
                self.assertEqual(f.read(), "rank 1 replacement=0\nrank 1 replacement=1\n")
            with open(os.path.join(logs, "attempt_0", "rank_0.log")) as f:  # started once
                self.assertEqual(f.read(), "rank 0 replacement=0\n")

    def test_no_replacement_without_restarts_left(self):
        code, out, err = self.run_replacing(0)
        self.assertEqual(code, 0, out + err)  # rank 0 finished: the job went on without rank 1
        self.assertNotIn("starting a replacement", err)
        self.assertNotIn("replacement=1", out)


class LogDir(unittest.TestCase):
    def test_output_goes_to_one_file_per_rank_and_attempt(self):
        with tempfile.TemporaryDirectory() as logs:
            code, out, err = run(launch("--nproc-per-node", "2", "--max-restarts", "1", "--log-dir", logs, "--",
                                        PYTHON, worker("fail_until_restart.py")),
                                 timeout=60, env=env_with(SUCCEED_AT=1))
            self.assertEqual(code, 0, err)
            self.assertNotIn("attempt", out)

            def log(attempt, rank):
                with open(os.path.join(logs, f"attempt_{attempt}", f"rank_{rank}.log")) as f:
                    return f.read()

            # The failed attempt may have stopped one rank before it printed.
            self.assertIn("attempt 0 of rank 0\n", log(0, 0) + log(0, 1).replace("rank 1", "rank 0"))
            for rank in range(2):
                self.assertEqual(log(1, rank), f"attempt 1 of rank {rank}\n")


if __name__ == "__main__":
    unittest.main()

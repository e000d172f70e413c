"""Training that survives a crash: `dptrain launch --max-restarts 1 -- dptrain train --resume auto
--checkpoint-every 4 --deterministic` on 2 processes, with rank 1 killed by SIGKILL before the first
checkpoint, just after one, mid-epoch after several, during validation, and (rank 0) while it
writes one, ends with weights and momentum bitwise equal to a run that never failed; one command line serves the first start and the
restart. --resume auto passes over a truncated newest checkpoint with a warning naming it."""

import json
import os
import re
import signal
import tempfile
import threading
import time
import unittest

from etcd_cluster import EtcdCluster
from file_creations import FileCreations
from proc import Started, dptrain, free_port, run, worker_of_rank
from train_runs import SMALL, STEPS, alone, compare_checkpoints, each_once, identical, last_json, trained_by_epoch


def launch(output, restarts, extra=()):
    return [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts), "--",
            dptrain(), "train", *SMALL, *extra, "--output", output]


def run_watching(args, on_line, env=None):
    """Starts `args` and hands each line of its output, as it comes, to `on_line(line, pid of the
    launcher)`; returns (code, out, err) once it ends, bounded at 240 s."""
    started = Started(args, env=env or alone())
    out_lines = []
    try:
        deadline = time.monotonic() + 240
        # Read to the end here: lines that readline() has buffered past the last one handed on
        # would be lost to wait(), which reads the pipe itself.
        while time.monotonic() < deadline:
            line = started.proc.stdout.readline()
            if not line:
                break
            out_lines.append(line)
            on_line(line, started.proc.pid)
        code, out, err = started.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        started.close()
    return code, "".join(out_lines) + out, err


def run_signalling(output, when, sig=signal.SIGKILL, to_launcher=False, rank=1, restarts=1, extra=(), env=None):
    """Launches with `restarts` restarts allowed and sends `sig` to `rank` (or to the launcher) as
    soon as a line of the launcher's output matches `when`; returns (code, out, err, the line it
    signalled at)."""
    signalled_at = []

    def signal_at(line, launcher):
        if not signalled_at and re.search(when, line):
            pid = launcher if to_launcher else worker_of_rank(launcher, rank)
            if pid is not None:
                os.kill(pid, sig)
                signalled_at.append(line.strip())

    code, out, err = run_watching(launch(output, restarts, extra), signal_at, env)
    return code, out, err, signalled_at[0] if signalled_at else None


def unfinished_writes(output):
    """The temporary files `<file>.tmp.<pid>` of atomic writes in `output`."""
    try:
        return [name for name in os.listdir(output) if ".tmp." in name]
    except FileNotFoundError:
        return []


def run_killing_the_writer(output, nth):
    """Launches with one restart allowed and kills the process named in the `nth` checkpoint
    temporary file created in `output` (rank 0, whose writer thread made it) the moment the kernel
    reports the file. Rank 0 writes one checkpoint at a time, so the files come in the order of the
    checkpoints taken, whatever the machine's load. Returns (code, out, err, the file's name or None,
    whether it was still there after the kill: the kill landed mid-write)."""
    done = threading.Event()
    killed = {}

    def kill_the_writer(creations):
        with creations:
            seen = 0
            while not done.is_set():
                name = creations.next(timeout=0.05)
                if name is None or not name.startswith("checkpoint.pt.tmp."):
                    continue
                seen += 1
                if seen < nth:
                    continue
                os.kill(int(name.rsplit(".", 1)[1]), signal.SIGKILL)
                time.sleep(0.2)  # a write the kill missed has been renamed by now
                killed.update(file=name, mid_write=name in unfinished_writes(output))
                return

    os.makedirs(output)
    watcher = threading.Thread(target=kill_the_writer, args=(FileCreations(output),), daemon=True)
    watcher.start()
    try:
        code, out, err = run(launch(output, restarts=1), timeout=240)
    finally:
        done.set()
        watcher.join()
    return code, out, err, killed.get("file"), killed.get("mid_write")


class ExactRecovery(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dpt_faults_")
        cls.reference = os.path.join(cls.tmp.name, "reference")
        code, out, err = run(launch(cls.reference, restarts=0), timeout=240)
        assert code == 0, out + err
        assert last_json(out)["global_step"] == STEPS, out

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def recover(self, name, kill_when, resumed_from):
        output = os.path.join(self.tmp.name, name)
        code, out, err, killed_at = run_signalling(output, kill_when)
        self.assertIsNotNone(killed_at, f"never saw {kill_when!r}:\n{out}\n{err}")
        self.assertEqual(code, 0, f"killed at {killed_at}\n{out}\n{err}")
        self.assertIn("dptrain launch: restarting the local group (restart 1 of 1)", err)
        self.assertEqual(last_json(out)["global_step"], STEPS, out)
        self.assertRegex(out, resumed_from, out)
        self.assert_same_as_reference(output, f"killed at {killed_at}")
        self.assert_round_recorded(output, out, "rank 1 was killed by signal 9")

    def assert_round_recorded(self, output, out, cause):
        """The restarted round's record in metrics.jsonl (and its line in the log): what ended the
        round before, where it resumed, the steps lost since then, the seconds it took."""
        with open(os.path.join(output, "metrics.jsonl")) as metrics:
            records = [json.loads(line) for line in metrics]
        rounds = [r for r in records if r["phase"] == "membership"]
        self.assertEqual(len(rounds), 1, rounds)
        r = rounds[0]
        self.assertEqual((r["round"], r["world_size"]), (1, 2))
        self.assertTrue(r["cause"].startswith(cause), r)
        resumed = re.search(r"resuming from .* global step (\d+)\)", out)
        self.assertEqual(r["resumed_step"], int(resumed[1]) if resumed else 0, out)
        self.assertEqual(r["world_size_before"], 2 if resumed else 0)
        # -p 1: every step of the round before is in the log, up to the last rank 0 reported.
        steps_before = [x["global_step"] for x in records[:records.index(r)] if x["phase"] == "train_step"]
        self.assertEqual(r["last_logged_step"], max(steps_before))
        self.assertEqual(r["steps_lost"], max(0, max(steps_before) - r["resumed_step"]))
        self.assertGreater(r["seconds"], 0)
        self.assertIn(f"round 1: after '{r['cause']}', 2 process(es)", out)

    def assert_same_as_reference(self, output, context):
        self.assertEqual(compare_checkpoints(os.path.join(self.reference, "checkpoint.pt"),
                                             os.path.join(output, "checkpoint.pt")),
                         identical("24 2 0 24 2 0"), context)

    def stop_and_resume(self, name, sig, to_launcher, expected_code, when=r"Epoch: \[0\]\[ ?6/12\]",
                        steps=range(6, 12), resumed_at=lambda step: f"epoch 0, step {step} of it", extra=()):
        """`sig` when a line matches `when` (mid-epoch 0 by default): every rank stops after one
        agreed step in `steps`, rank 0 writes checkpoint.pt there, nothing restarts; the same
        command line (with `extra`) then finishes the run exactly."""
        output = os.path.join(self.tmp.name, name)
        code, out, err, signalled_at = run_signalling(output, when, sig, to_launcher, extra=extra)
        self.assertIsNotNone(signalled_at, out + err)
        self.assertEqual(code, expected_code, out + err)
        self.assertNotIn("restarting the local group", err)
        stop = re.search(r"stopping on request after global step (\d+) \(a stop signal reached (\d) rank", out)
        self.assertIsNotNone(stop, out + err)
        step = int(stop.group(1))
        self.assertIn(step, steps, out)
        # The launcher's forwarded signal may reach one rank after that step's agreement: then one
        # rank asked at the step and the other stops with it.
        self.assertIn(stop.group(2), ("1", "2") if to_launcher else ("1",), out)
        self.assertEqual(last_json(out)["stopped_on_request"], True)
        self.assertEqual(last_json(out)["global_step"], step)
        code, out, err = run(launch(output, restarts=0, extra=extra), timeout=240)
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"resuming from .*checkpoint\.pt \(" + re.escape(resumed_at(step)))
        self.assert_same_as_reference(output, f"stopped after step {step}")

    # Which checkpoint a restart finds depends on the machine's load, the weights never: rank 0's
    # writer runs at low priority, a periodic checkpoint due while it still writes the one before
    # is skipped, and the end of an epoch's is written after validation. On a loaded machine step
    # 4's write was still running at step 5 (CI once), so the newest whole checkpoint at a kill may
    # be one or two older than the steps printed suggest.

    def test_killed_before_the_first_checkpoint(self):
        # Nothing to resume: the restart starts fresh, with the same command line.
        self.recover("before_first", r"Epoch: \[0\]\[ ?2/12\]", r"no checkpoint in .* yet; starting fresh(.|\n)*"
                     r"no checkpoint in .* yet; starting fresh")

    def test_killed_just_after_a_checkpoint(self):
        # Killed when rank 0 reports the first checkpoint (step 4's) written, not at step 5, by
        # which time that write may not have finished (see above).
        self.recover("after_checkpoint", r"checkpoint: wrote .*checkpoint\.pt ",
                     r"resuming from .*checkpoint\.pt \(epoch 0, step (4|8) ")

    def test_killed_mid_epoch(self):
        # Most often the restart takes epoch 0's last checkpoint (epoch 1, step 0), or step 4's if
        # the kill lands late; epoch 0's may still be being written (a CI log reported it at [1][1]).
        self.recover("mid_epoch", r"Epoch: \[1\]\[ ?3/12\]",
                     r"resuming from .*checkpoint\.pt \((epoch 0, step [48]|epoch 1, step [04]) ")

    def test_killed_in_validation(self):
        # The train summary is printed just before validation starts; the epoch's checkpoint comes
        # after validation, so the restart redoes the steps since step 8 (or 4). Validation takes a
        # third of a second: on a loaded machine the kill can land after it and after the epoch's
        # checkpoint (CI once), and the restart then begins epoch 1.
        self.recover("in_validation", r"Epoch: \[0\] train",
                     r"resuming from .*checkpoint\.pt \((epoch 0, step [48]|epoch 1, step 0) ")


    def test_rank0_killed_while_it_writes_a_checkpoint(self):
        """SIGKILL to rank 0 as soon as the temporary file of its second checkpoint (step 8's, or
        the epoch's where step 8's was skipped) appears: the restart resumes from the last whole
        one (step 4's, or the second where the write was renamed before the signal landed),
        removes the file the dead writer left, and ends bitwise where the run that never failed
        ends."""
        output = os.path.join(self.tmp.name, "writer_killed")
        code, out, err, file, mid_write = run_killing_the_writer(output, nth=2)
        self.assertIsNotNone(file, f"no second checkpoint write was seen:\n{out}\n{err}")
        self.assertEqual(code, 0, f"killed at {file}\n{out}\n{err}")
        self.assertIn("dptrain launch: restarting the local group (restart 1 of 1)", err)
        second = "epoch 1, step 0" if "checkpoint: none after step 8" in out else "epoch 0, step 8"
        self.assertRegex(out, r"resuming from .*checkpoint\.pt \(%s of it" % ("epoch 0, step 4" if mid_write else second))
        if mid_write:
            self.assertRegex(out, r"checkpoint: removed .*%s, a write its killed process left unfinished" %
                             re.escape(file))
        self.assertEqual(unfinished_writes(output), [])
        self.assertEqual(last_json(out)["global_step"], STEPS, out)
        self.assert_same_as_reference(output, f"killed while writing {file}")

    def test_sigterm_to_one_rank_stops_all_at_one_step(self):
        # The rank's own code tells the launcher not to restart: the group stopped on request.
        self.stop_and_resume("sigterm_rank", signal.SIGTERM, to_launcher=False, expected_code=75)

    def test_sigterm_during_validation_stops_after_it(self):
        # Validation runs to its end; the epoch's checkpoint is the stop's, and no step of the next
        # epoch is taken first. The validation set is 12,000 images here (about 6 s, the training
        # set and so the weights unchanged): with SMALL's 401 (0.2 s) a loaded machine's ranks had
        # finished it and 3 more steps before the signal landed (CI once, stop at step 15), and
        # with 4,000 (2 s) 2 more (CI once, beside the CUDA leg's compilers, stop at step 14). One
        # that still lands after its end is taken at the next step, 13.
        self.stop_and_resume("sigterm_validation", signal.SIGTERM, to_launcher=False, expected_code=75,
                             when=r"Epoch: \[0\] train", steps=[12, 13],
                             resumed_at=lambda step: f"epoch 1, step {step - 12} of it",
                             extra=["--dummy-val-size", "12000"])

    def test_sigusr1_to_the_launcher_stops_all_at_one_step(self):
        # The launcher forwards the signal to every worker and ends with 128 + the signal.
        self.stop_and_resume("sigusr1_launcher", signal.SIGUSR1, to_launcher=True, expected_code=128 + signal.SIGUSR1)


    def test_stopped_rank_is_named_by_its_heartbeat_and_the_group_restarts(self):
        # SIGSTOP: alive but silent. The collective timeout keeps its default half hour: rank 0's
        # heartbeat names rank 1 within 3 step times + 2 s of silence, and exits; the launcher
        # continues the stopped worker so that it takes its SIGTERM, restarts the group, and
        # --resume auto finishes the run exactly.
        output = os.path.join(self.tmp.name, "stopped_rank")
        t0 = time.monotonic()
        code, out, err, stopped_at = run_signalling(output, r"Epoch: \[0\]\[ ?6/12\]", signal.SIGSTOP)
        self.assertIsNotNone(stopped_at, out + err)
        self.assertEqual(code, 0, out + err)
        self.assertRegex(err, r"rank 0: heartbeat: rank 1 \(\S+, pid \d+\) has been silent for [\d.]+ s; suspected, "
                              r"confirming for 1 s")
        lost = re.search(r"rank 0: rank 1 \(\S+, pid \d+\) sent no heartbeat for ([\d.]+) s \(the bound: 3 step times "
                         r"of ([\d.]+) s \+ 2 s\) while the rendezvous store at \S+ kept answering: it is stopped", err)
        self.assertIsNotNone(lost, err)
        # Named within the bound, never before five eighths of it (dist/heartbeat.h); as printed, rounded.
        self.assertGreaterEqual(float(lost[1]) + 0.03, 0.625 * (3 * float(lost[2]) + 2))
        self.assertIn("rank 0: exiting (status 1) so that the launcher restarts the group", err)
        self.assertNotIn("did not complete within", err)  # not the collective timeout
        self.assertIn("dptrain launch: restarting the local group (restart 1 of 1)", err)
        self.assertRegex(out, r"resuming from .*checkpoint\.pt \(epoch 0, step [48] ")
        self.assert_same_as_reference(output, f"stopped at {stopped_at}")
        self.assert_round_recorded(output, out, "rank 0 exited with code 1: rank 0: exiting (status 1)")
        self.assertLess(time.monotonic() - t0, 200)


class HungRanks(unittest.TestCase):
    """Over Gloo alone (DPTRAIN_SHM=0) a timed-out wait cannot tell which peer is missing: the
    ranks that timed out ask each other through the store. (Without the heartbeat, which would
    name the stopped rank first.)"""

    def hang(self, rank):
        with tempfile.TemporaryDirectory(prefix="dpt_hang_") as tmp:
            t0 = time.monotonic()
            code, out, err, stopped_at = run_signalling(
                tmp, r"Epoch: \[0\]\[ ?6/12\]", signal.SIGSTOP, rank=rank, restarts=0,
                extra=["--dist-timeout", "3", "--heartbeat", "off"], env=dict(alone(), DPTRAIN_SHM="0"))
            self.assertIsNotNone(stopped_at, out + err)
            self.assertEqual(code, 1, out + err)
            # The timeout, the survey's grace (as long as the timeout here) and the launcher's
            # 5 s grace period, with room for a slow machine.
            self.assertLess(time.monotonic() - t0 - 3 - 3 - 5, 60)
            return err

    def assert_stopped_after_step_6(self, err, pattern):
        """`pattern` (with a group for the step) is in `err`, at a step after rank 0 reported step 6:
        the stop lands when the test has read that line and found the worker, by which time the
        ranks may have gone on a step or two (a loaded machine: step 8 in one CI run)."""
        found = re.search(pattern, err)
        self.assertIsNotNone(found, f"{pattern!r} not in:\n{err}")
        self.assertIn(int(found[1]), range(6, 13), found[0])

    def test_a_stopped_rank_is_named_by_the_ranks_that_waited(self):
        err = self.hang(rank=1)
        self.assert_stopped_after_step_6(
            err, r"rank 0: (?:all_reduce|broadcast)\S* .*\[collective #\d+, step (\d+)\] failed: it did not complete "
                 r"within 3 s\. Rank 1 did not arrive \(or stopped inside it\): no report within 3 s of this rank's, so "
                 r"it is stopped")
        self.assert_stopped_after_step_6(err, r"#\d+ \S+ .*step (\d+): FAILED after")

    def test_a_stopped_store_host_is_named_as_such(self):
        # Rank 0 serves the store: the survey cannot reach it and says so instead of waiting.
        err = self.hang(rank=0)
        self.assert_stopped_after_step_6(
            err, r"rank 1: .*\[collective #\d+, step (\d+)\] failed: it did not complete within 3 s\. The rendezvous "
                 r"store did not answer the survey of the other ranks(?:| within 3 s); rank 0 serves it for env:// and "
                 r"tcp://, so rank 0 is probably stopped or gone")


class GoingOn(unittest.TestCase):
    """--on-failure continue on 3 processes: rank 2 killed (SIGKILL) or stopped (SIGSTOP) after rank
    0 reported step 3 of 8, or killed after step 8 (in the epoch's validation), or rank 0 killed
    (the launcher serves the store). The other two drop the step in flight (or leave the
    validation, to run it again), re-form without it and finish in-process: nothing restarts, the
    global batch of 48 becomes 32 (it does not split into 2 x 16: the learning rate follows), and,
    as --sample-log shows, each epoch trains every sample exactly once."""

    def go_on(self, sig, when=r"Epoch: \[0\]\[ ?3/8\]", lost=2):
        with tempfile.TemporaryDirectory(prefix="dpt_continue_") as tmp:
            output = os.path.join(tmp, "run")
            samples = os.path.join(tmp, "samples.txt")
            args = [dptrain(), "launch", "--standalone", "--nproc-per-node", "3", "--on-failure", "continue",
                    "--grace-period", "2", "--", dptrain(), "train", *SMALL, "--on-failure", "continue",
                    "--sample-log", samples, "--output", output]
            workers = {}

            def signal_at(line, launcher):
                if not workers and re.search(when, line):
                    workers.update({r: worker_of_rank(launcher, r) for r in range(3)})
                    os.kill(workers[lost], sig)

            code, out, err = run_watching(args, signal_at)
            self.assertTrue(workers, out + err)
            self.assertEqual(code, 0, out + err)
            self.assertNotIn("restarting", err)
            left = [r for r in range(3) if r != lost]
            # The new rank 0's last words (a rank left behind may speak after them, once continued).
            result = json.loads(re.findall(rf"^\[rank {left[0]}\] (\{{.*\}})$", out, re.M)[-1])
            self.assertEqual(result["global_step"], 24, out)  # 12 steps an epoch over 2
            for new_rank, rank in enumerate(left):
                self.assertRegex(out + err, rf"rank {rank}: (?:dropping step \d+|leaving the end of epoch 0 \(to run it "
                                            rf"again\)) and going on without the lost rank")
                self.assertIn(f"rank {rank} goes on as rank {new_rank} of 2 (ranks {left[0]} {left[1]} of the 3 before)",
                              out + err)
            self.assertIn("world size 3 -> 2: a global batch of 48 does not split into 2 process(es) x 16", out + err)
            self.assert_each_sample_once(samples, lost=lost)
            with open(os.path.join(output, "metrics.jsonl")) as metrics:
                rounds = [r for r in map(json.loads, metrics) if r["phase"] == "membership"]
            self.assertEqual(len(rounds), 1, rounds)
            self.assertEqual((rounds[0]["round"], rounds[0]["world_size_before"], rounds[0]["world_size"]), (1, 3, 2))
            self.assertGreater(rounds[0]["seconds"], 0)
            return out + err, workers

    def test_a_killed_rank_is_replaced_and_the_replacement_joins_from_a_live_peer(self):
        # --max-restarts 1: the launcher starts a replacement for rank 2, which asks to join; the
        # two ranks that went on admit it after their next step and rank 0 sends it the state.
        with tempfile.TemporaryDirectory(prefix="dpt_rejoin_") as tmp:
            output = os.path.join(tmp, "run")
            samples = os.path.join(tmp, "samples.txt")
            args = [dptrain(), "launch", "--standalone", "--nproc-per-node", "3", "--on-failure", "continue",
                    "--max-restarts", "1", "--grace-period", "2", "--", dptrain(), "train", *SMALL,
                    # A third epoch: time for the replacement to start on a loaded machine.
                    "--epochs", "3", "--on-failure", "continue", "--sample-log", samples, "--output", output]
            workers = {}

            def kill_at(line, launcher):
                if not workers and re.search(r"Epoch: \[0\]\[ ?3/8\]", line):
                    workers.update({r: worker_of_rank(launcher, r) for r in range(3)})
                    os.kill(workers[2], signal.SIGKILL)

            code, out, err = run_watching(args, kill_at)
            said = out + err
            self.assertTrue(workers, said)
            self.assertEqual(code, 0, said)
            self.assertIn("dptrain launch: starting a replacement for rank 2 (1 of 1), to join the workers that went on",
                          said)
            self.assertRegex(said, r"rank 2 \(the replacement of rank 2\): received the state of global step \d+ from "
                                   r"rank 0: [\d.]+ MB")
            self.assertRegex(said, r"rank 0: the 3 replicas agree bitwise after the join \(weights and optimizer state: "
                                   r"digest [0-9a-f]{16}")
            self.assertRegex(said, r"rank 2: the 3 replicas agree bitwise after the join")
            self.assertIn("world size 2 -> 3: a global batch of 32 does not split into 3 process(es) x 16", said)
            # Back at 3 x 16, an epoch takes 8 steps: global step 24 at the end, as undisturbed.
            self.assertEqual(json.loads(re.findall(r"^\[rank 0\] (\{.*\})$", out, re.M)[-1])["global_step"], 24)
            # The rest of the epoch it joined in (the first, unless the machine is slow), dealt over 3,
            # repeats what evens it out (the sampler's padding); none when it joined as an epoch began.
            rest = re.search(r"the rest of epoch (\d) \(from sample (\d+)\) is re-sharded over 3", said)
            # A rest there is: joined after an epoch's last (short) step, there is none to re-shard.
            self.assertLess(int(rest[2]) if rest else 0, 384, said)
            self.assert_each_sample_once(samples, lost=2, repeated={int(rest[1]): -(384 - int(rest[2])) % 3} if rest else {},
                                         epochs=3)
            with open(os.path.join(output, "metrics.jsonl")) as metrics:
                rounds = [r for r in map(json.loads, metrics) if r["phase"] == "membership"]
            self.assertEqual([(r["round"], r["world_size_before"], r["world_size"]) for r in rounds],
                             [(1, 3, 2), (2, 2, 3)], rounds)
            self.assertEqual(rounds[1]["cause"], "the replacement(s) of rank(s) 2 joined")

    def assert_each_sample_once(self, samples, lost, repeated=None, epochs=2):
        """Every epoch's trained samples, from every rank's --sample-log: each of the 384 once, but
        for `repeated` ({epoch: count}) that the sampler repeats to deal the rest of an epoch evenly."""
        trained, _ = trained_by_epoch(samples, range(3), lost)
        self.assertEqual(sorted(trained), list(range(epochs)))
        for epoch, indices in trained.items():
            self.assertEqual(sorted(set(indices)), list(range(384)), f"epoch {epoch}")
            self.assertEqual(len(indices), 384 + (repeated or {}).get(epoch, 0), f"epoch {epoch}")

    def test_a_killed_rank_is_left_behind_and_the_others_finish(self):
        said, workers = self.go_on(signal.SIGKILL)
        self.assertIn(f"dptrain launch: rank 2 (pid {workers[2]}) was killed by signal 9; the other workers go on "
                      "without it (--on-failure continue)", said)

    def test_a_rank_killed_as_an_epoch_ends_is_left_behind_and_its_validation_run_again(self):
        said, _ = self.go_on(signal.SIGKILL, when=r"Epoch: \[0\]\[ ?8/8\]")
        self.assertRegex(said, r"rank 0: leaving the end of epoch 0 \(to run it again\) and going on")

    def test_rank_0_killed_the_next_rank_takes_its_place(self):
        said, workers = self.go_on(signal.SIGKILL, lost=0)
        self.assertIn(f"dptrain launch: rank 0 (pid {workers[0]}) was killed by signal 9", said)
        self.assertRegex(said, r"\[rank 1\] checkpoint: wrote \S+checkpoint\.pt")  # rank 1 writes them now

    def test_a_stopped_rank_is_named_left_behind_and_stopped_at_the_end(self):
        said, workers = self.go_on(signal.SIGSTOP)
        self.assertRegex(said, r"rank 1: rank 2 \(\S+, pid \d+\) sent no heartbeat for [\d.]+ s")
        self.assertIn("rank 0: heartbeat: told through the store: rank 1: rank 2", said)
        self.assertIn(f"dptrain launch: rank 2 (pid {workers[2]}) still runs a grace period after the others "
                      "finished without it: stopping it", said)


class NoVitalMachine(unittest.TestCase):
    """--rdzv-backend etcd: the workers' store lives in a 3-member etcd cluster instead of node 0's
    launcher. Two launchers (nodes) of 2 workers each; node 0's launcher is killed with its workers
    (as when its machine goes) and one etcd member with it: node 1's ranks go on as a group of 2,
    rank 2 becoming rank 0, and finish, each epoch's samples trained once."""

    def test_the_job_outlives_node_0_and_an_etcd_member(self):
        with EtcdCluster(3) as etcd, tempfile.TemporaryDirectory(prefix="dpt_etcd_job_") as tmp:
            samples = os.path.join(tmp, "samples.txt")
            port = free_port()

            def node(rank):
                return Started([dptrain(), "launch", "--nnodes", "2", "--node-rank", str(rank), "--nproc-per-node", "2",
                                "--master-addr", "127.0.0.1", "--master-port", str(port), "--rdzv-id", "etcd-test",
                                "--rdzv-backend", "etcd", "--rdzv-endpoint", ",".join(etcd.endpoints),
                                "--on-failure", "continue", "--grace-period", "2", "--", dptrain(), "train", *SMALL,
                                "-b", "12", "--on-failure", "continue", "--sample-log", samples,
                                "--output", os.path.join(tmp, f"node{rank}")], env=alone())
            nodes = [node(0), node(1)]
            try:
                lines = []
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline:
                    line = nodes[0].proc.stdout.readline()
                    if not line:
                        break
                    lines.append(line)
                    if re.search(r"Epoch: \[0\]\[ ?3/8\]", line):
                        os.killpg(nodes[0].proc.pid, signal.SIGKILL)  # the launcher and its workers
                        etcd.kill(0)
                        break
                self.assertTrue(lines and "3/8" in lines[-1], "".join(lines))
                code, out, err = nodes[1].wait(timeout=max(1, deadline - time.monotonic()))
            finally:
                for n in nodes:
                    n.close()
            said = out + err
            self.assertEqual(code, 0, said)
            self.assertIn("rank 2 goes on as rank 0 of 2 (ranks 2 3 of the 4 before)", said)
            # The new rank 0 (worker "rank 2") ends the run: 2 x 12 a step from then on.
            self.assertRegex(said, r"\[rank 2\] \{.*\"epochs\":2")
            epochs, _ = trained_by_epoch(samples, range(4), lost=(0, 1))
            self.assertEqual(sorted(epochs), [0, 1])
            self.assertTrue(each_once(epochs, 384, 2), {e: len(i) for e, i in epochs.items()})


class AutoResume(unittest.TestCase):
    def test_truncated_newest_checkpoint_falls_back_with_a_warning(self):
        with tempfile.TemporaryDirectory(prefix="dpt_auto_") as tmp:
            args = [dptrain(), "train", *SMALL, "--dummy-val-size", "33", "--output", tmp]
            # One process: 24 steps per epoch; stop at 30, after the epoch-1 checkpoint.
            code, out, err = run(args + ["--max-steps", "30"], timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            self.assertIn("--resume auto: no checkpoint in", out)
            latest = os.path.join(tmp, "checkpoint.pt")
            os.truncate(latest, 1000)
            code, out, err = run(args, timeout=240, env=alone())
            self.assertEqual(code, 0, out + err)
            self.assertRegex(out, r"warning: checkpoint .*checkpoint\.pt \(1000 bytes\) is truncated or corrupt")
            self.assertRegex(out, r"resuming from .*checkpoint_epoch1\.pt \(epoch 1, step 0 of it, global step 24\)")
            self.assertEqual(last_json(out)["global_step"], 48)

    def test_every_file_unreadable_is_an_error_not_a_fresh_start(self):
        with tempfile.TemporaryDirectory(prefix="dpt_auto_") as tmp:
            with open(os.path.join(tmp, "checkpoint.pt"), "wb") as f:
                f.write(b"not a checkpoint")
            code, out, err = run([dptrain(), "train", *SMALL, "--output", tmp], timeout=240, env=alone())
            self.assertEqual(code, 1, out + err)
            self.assertIn("--resume auto: no checkpoint in " + tmp + " reads back whole", err)
            self.assertIn("move the folder aside to start over", err)

    def test_auto_needs_an_output_folder(self):
        code, out, err = run([dptrain(), "train", *SMALL], timeout=120, env=alone())
        self.assertEqual(code, 2, out + err)
        self.assertIn("--resume auto need --output", err.replace("--checkpoint-every, --checkpoint-minutes and ", ""))


class SlowRanks(unittest.TestCase):
    def test_a_throttled_rank_is_named_with_its_slow_part(self):
        # Rank 1 runs at about a third of its speed (stopped 60 ms of every 90). The ranks step in
        # lockstep, so the step time says nothing; rank 1's busy time does: after three slow
        # windows of 4 steps every rank's log names it, and rank 0's metrics.jsonl records it.
        # Rank 0, which only waits longer, is never named. (At half speed, 40 ms of every 80, over
        # 30 steps, a loaded CI machine once saw no three slow windows in a row: rank 0's own
        # busy time grows when another build shares its cores.)
        with tempfile.TemporaryDirectory(prefix="dpt_straggler_") as output:
            args = [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "train",
                    "--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-train-size", str(2 * 16 * 40),
                    "--dummy-val-size", "64", "-b", "16", "-j", "1", "--epochs", "1", "-p", "100",
                    "--straggler-window", "4", "--output", output]
            started = Started(args, env=alone())
            done = threading.Event()

            def throttle():
                pid = None
                while pid is None and not done.is_set():
                    pid = worker_of_rank(started.proc.pid, 1)
                    time.sleep(0.01)
                try:
                    while not done.is_set():
                        os.kill(pid, signal.SIGSTOP)
                        time.sleep(0.06)
                        os.kill(pid, signal.SIGCONT)
                        time.sleep(0.03)
                except (ProcessLookupError, TypeError):
                    pass

            throttler = threading.Thread(target=throttle)
            throttler.start()
            try:
                code, out, err = started.wait(timeout=180)
            finally:
                done.set()
                throttler.join()
                started.close()
            self.assertEqual(code, 0, out + err)
            logs = out + err
            named = re.findall(r"\[rank (\d)\] straggler: rank (\d) on \S+ is slow: busy ([\d.]+) ms per step against "
                               r"the other ranks' ([\d.]+) ms \([\d.]+x\) for (\d+) windows \((\d+) steps\) up to step \d+; "
                               r"its slowest part is ", logs)
            self.assertTrue(named, logs)
            self.assertEqual({rank for _, rank, _, _, _, _ in named}, {"1"}, logs)
            self.assertEqual({logger for logger, _, _, _, _, _ in named}, {"0", "1"}, logs)
            for _, _, busy, others, windows, steps in named:
                self.assertGreater(float(busy), 1.25 * float(others))
                self.assertEqual(int(windows) % 3, 0)
                self.assertIn(int(steps), (4 * int(windows) - 1, 4 * int(windows)))  # the first window has 3
            with open(os.path.join(output, "metrics.jsonl")) as metrics:
                records = [json.loads(line) for line in metrics]
            stragglers = [r for r in records if r["phase"] == "straggler"]
            self.assertTrue(stragglers)
            self.assertTrue(all(r["rank"] == 1 and r["busy_ms"] > 1.25 * r["others_busy_ms"]
                                and r["steps"] in (4 * r["windows"] - 1, 4 * r["windows"]) for r in stragglers))
            # Every window's busy times, and the report's table of the ranks named.
            windows = [r for r in records if r["phase"] == "rank_busy"]
            self.assertEqual([r["global_step"] for r in windows], list(range(4, 41, 4)))
            code, report_out, report_err = run([dptrain(), "report", output], timeout=60)
            self.assertEqual(code, 0, report_out + report_err)
            with open(os.path.join(output, "report.html")) as page:
                html = page.read()
            table = re.search(r'<table id="stragglers">.*?</table>', html, re.S)
            self.assertIsNotNone(table, html)
            self.assertEqual(set(re.findall(r'<tr data-rank="(\d+)">', table[0])), {"1"})
            self.assertIn("busy ms per step (without waiting for the others)", html)


if __name__ == "__main__":
    unittest.main()

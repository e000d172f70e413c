"""The training styles of `dptrain train`: --multiprocessing-distributed (mp.spawn's style, the
command starting its own workers), --mode hvd (Horovod's DistributedOptimizer) and --mode dp (one
process, nn.DataParallel's replicas), each against the DistributedDataParallel run it replaces."""

import functools
import json
import os
import re
import shutil
import signal
import tempfile
import time
import unittest

import small_training
from proc import PYTHON, Started, dptrain, env_with, free_port, pid_alive, run, wait_dead

BOUND = 150
# Same intra-op threads everywhere, so that the floating-point results can match exactly; no GPU,
# so that --multiprocessing-distributed needs --nprocs on any machine.
ENV = env_with(OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE", CUDA_VISIBLE_DEVICES="", MASTER_PORT=None,
               MASTER_ADDR=None, RANK=None, WORLD_SIZE=None, LOCAL_RANK=None)


def train(*args, env=ENV):
    code, out, err = run(list(args), timeout=BOUND, env=env)
    assert code == 0, f"{args} failed with {code}:\n{out}\n{err}"
    results = small_training.results(out)
    assert len(results) == 1, out
    return results[0], out


def launched(*extra):
    """`dptrain launch` with 2 processes (DistributedDataParallel unless extra says otherwise)."""
    return train(dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--",
                 *small_training.command(*extra))


def single(*extra):
    return train(*small_training.command(*extra))


# The two DDP references, each trained once for the whole module: (result line, output, output folder).
_FOLDERS = []


@functools.lru_cache(maxsize=None)
def reference(start, *extra):
    folder = tempfile.mkdtemp(prefix="dpt-ddp-")
    _FOLDERS.append(folder)
    return (*start(*extra, "--output", folder), folder)


def launched_ddp():
    """DistributedDataParallel on 2 processes x 64."""
    return reference(launched)


def single_ddp():
    """One process x 128: the same global batch."""
    return reference(single, "-b", "128")


def tearDownModule():
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def weights(checkpoint):
    """The model's state_dict in a checkpoint, read by Python PyTorch: {name: list of floats}."""
    code = ("import json, sys, torch; sd = torch.load(sys.argv[1])['state_dict'];"
            "print(json.dumps({k: v.double().flatten().tolist() for k, v in sd.items()}))")
    status, out, err = run([PYTHON, "-c", code, checkpoint], timeout=60)
    assert status == 0, err
    return json.loads(out)


class MultiprocessingDistributed(unittest.TestCase):
    def test_two_spawned_workers_train_as_dptrain_launch_does(self):
        reference, _, _ = launched_ddp()
        result, out = train(*small_training.command("--multiprocessing-distributed", "--nprocs", "2"))
        self.assertEqual(out.count(small_training.world_line(2)), 1, out)
        self.assertEqual(result, reference)
        self.assertEqual(small_training.val_images(result), small_training.VAL_IMAGES)

    def test_world_size_counts_nodes_and_the_rendezvous_is_the_dist_url(self):
        # main.py's meaning: --world-size 1 node of 2 workers is a group of 2, node 0 holds ranks 0-1.
        port = free_port()
        code, out, err = run(small_training.command("--multiprocessing-distributed", "--nprocs", "2", "--max-steps",
                                                    "1", "--world-size", "1", "--rank", "0",
                                                    "--dist-url", f"tcp://127.0.0.1:{port}"),
                             timeout=BOUND, env=ENV)
        self.assertEqual(code, 0, out + err)
        self.assertIn(f"rendezvous tcp://127.0.0.1:{port}", err)
        self.assertEqual(out.count(small_training.world_line(2)), 1, out)
        self.assertEqual(len(small_training.results(out)), 1, out)

    def test_a_failing_worker_is_named_and_fails_the_command(self):
        code, out, err = run(small_training.command("--multiprocessing-distributed", "--nprocs", "2",
                                                    *small_training.FAILING_ARGS), timeout=BOUND, env=ENV)
        self.assertNotEqual(code, 0, out + err)
        self.assertRegex(err, r"spawn: rank [01] \(pid \d+\) failed first: it exited with code 1 after [\d.]+ s; "
                              r"the other workers were stopped\. Its last 1 line\(s\):\n    rank [01]: unknown model "
                              r"architecture 'resnet7'")
        self.assertEqual(small_training.results(out), [])

    def test_ctrl_c_stops_every_worker(self):
        started = Started(small_training.command("--multiprocessing-distributed", "--nprocs", "2", "--epochs", "50",
                                                 "--dummy-train-size", "4096"), env=ENV)
        try:
            workers = []
            deadline = time.monotonic() + 60
            while len(workers) < 2 and time.monotonic() < deadline:
                workers = [int(p) for p in re.findall(rb"\d+", _children(started.proc.pid))]
                time.sleep(0.1)
            started.extra_pids += workers
            self.assertEqual(len(workers), 2)
            started.proc.send_signal(signal.SIGINT)
            code, out, err = started.wait(60)
            self.assertEqual(code, 130, out + err)
            self.assertIn("spawn: interrupted by signal 2", err)
            self.assertTrue(wait_dead(workers, 10), [p for p in workers if pid_alive(p)])
        finally:
            started.close()

    def test_what_cannot_be_spawned_is_refused_before_any_worker_starts(self):
        cases = [(["--nprocs", "2", "--world-size", "2", "--rank", "1"],
                  "--world-size 2 nodes with --multiprocessing-distributed need --dist-url tcp://HOST:PORT of node 0"),
                 (["--nprocs", "2", "--dist-url", "file:///tmp/x"],
                  "--multiprocessing-distributed rendezvous over tcp://HOST:PORT (or a free local port when "
                  "--dist-url is not given), not 'file:///tmp/x'"),
                 ([], "--multiprocessing-distributed starts one worker per visible GPU and none is visible; give the "
                      "number of workers with --nprocs N"),
                 # Read as init_process_group reads it (a port with letters was taken as its digits).
                 (["--nprocs", "2", "--dist-url", "tcp://127.0.0.1:29511abc"],
                  "init method 'tcp://127.0.0.1:29511abc': port '29511abc' is not a number; use env://, "
                  "tcp://HOST:PORT or file:///ABSOLUTE/PATH"),
                 (["--nprocs", "2", "--dist-url", "tcp://127.0.0.1:99999"],
                  "init method 'tcp://127.0.0.1:99999': port 99999 is outside 1..65535")]
        for extra, message in cases:
            code, out, err = run(small_training.command("--multiprocessing-distributed", *extra), timeout=BOUND, env=ENV)
            self.assertEqual((code, err), (2, f"dptrain: error: {message}\n"), out)

    def test_dp_mode_is_refused(self):
        code, out, err = run(small_training.command("--multiprocessing-distributed", "--nprocs", "2", "--mode", "dp",
                                                    "--replicas", "2"), timeout=BOUND, env=ENV)
        self.assertEqual(code, 2, out + err)
        self.assertIn("--mode dp is one process; it cannot be combined with --multiprocessing-distributed", err)


def _children(pid):
    """The pids of `pid`'s direct children, as /proc lists them."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError):  # gone, before the open or the read
        return b""


class HorovodStyle(unittest.TestCase):
    def test_hvd_trains_the_same_weights_as_ddp(self):
        ddp, ddp_out, ddp_dir = launched_ddp()
        dirs = {"ddp": ddp_dir, "hvd": tempfile.mkdtemp(prefix="dpt-hvd-")}
        self.addCleanup(shutil.rmtree, dirs["hvd"], ignore_errors=True)
        hvd, hvd_out = launched("--mode", "hvd", "--output", dirs["hvd"])
        self.assertIn(", device cpu, DistributedDataParallel over gloo + shared memory\n", ddp_out)
        self.assertIn(", device cpu, hvd::DistributedOptimizer over gloo + shared memory\n", hvd_out)
        # The same reducer averages the same gradients: rank 0's parameters and BatchNorm
        # statistics are bit for bit those of DDP, and so are the training metrics.
        self.assertEqual(weights(os.path.join(dirs["hvd"], "checkpoint.pt")),
                         weights(os.path.join(dirs["ddp"], "checkpoint.pt")))
        self.assertEqual(train_line(hvd_out), train_line(ddp_out))
        self.assertEqual(json.loads(hvd)["global_step"], json.loads(ddp)["global_step"])
        # Both modes give every rank rank 0's BatchNorm statistics before validating, so validation
        # is the same in both and exactly that of evaluating the checkpoint.
        self.assertEqual(json.loads(hvd)["val"], json.loads(ddp)["val"])
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "eval",
                              "--dummy", "--dummy-train-size", "512", "--dummy-val-size", "333", "-b", "64", "-j", "1",
                              "--deterministic", "--checkpoint", os.path.join(dirs["hvd"], "checkpoint.pt")],
                             timeout=BOUND, env=ENV)
        self.assertEqual(code, 0, out + err)
        evaluated = re.findall(r'\{"acc1":.*"loss_sum":[^}]*\}', out)
        self.assertEqual(len(evaluated), 1, out)
        self.assertEqual(json.loads(evaluated[0]), json.loads(hvd)["val"])


def train_line(output):
    """Rank 0's summary of the training epoch, without its timing."""
    lines = re.findall(r"Epoch: \[0\] train +(Loss .* samples \d+)", output)
    assert len(lines) == 1, output
    return lines[0]


class DataParallelMode(unittest.TestCase):
    def test_one_replica_is_the_single_process_run(self):
        reference, _, _ = single_ddp()
        result, out = single("-b", "128", "--mode", "dp", "--replicas", "1")
        self.assertIn(small_training.world_line(1) + ", batch 128 per step (split over the replicas), lr ", out)
        self.assertIn(", device cpu, DataParallel over 1 replicas (cpu)\n", out)
        self.assertEqual(result, reference)

    def test_two_replicas_split_the_batch_of_one_process(self):
        reference, _, ddp_dir = single_ddp()
        dirs = {"ddp": ddp_dir, "dp": tempfile.mkdtemp(prefix="dpt-dp-")}
        self.addCleanup(shutil.rmtree, dirs["dp"], ignore_errors=True)
        result, out = single("-b", "128", "--mode", "dp", "--replicas", "2", "--output", dirs["dp"])
        # The checkpoint holds the plain model's names, as in every mode.
        self.assertEqual(list(weights(os.path.join(dirs["dp"], "checkpoint.pt"))),
                         list(weights(os.path.join(dirs["ddp"], "checkpoint.pt"))))
        self.assertIn(", device cpu, DataParallel over 2 replicas (cpu, cpu)\n", out)
        dp, one = json.loads(result), json.loads(reference)
        # Same steps and every validation sample counted once, on the primary replica.
        self.assertEqual(dp["global_step"], one["global_step"])
        self.assertEqual(dp["val"]["count"], small_training.VAL_IMAGES)
        # BatchNorm normalises each replica's half batch with its own statistics, so the runs
        # differ in rounding and in those statistics, not in what they learn.
        self.assertAlmostEqual(dp["val"]["loss"], one["val"]["loss"], delta=0.05 * one["val"]["loss"])

    def test_a_launched_dp_run_is_refused(self):
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--",
                              *small_training.command("--mode", "dp", "--replicas", "2")], timeout=BOUND, env=ENV)
        self.assertNotEqual(code, 0, out + err)
        self.assertIn("--mode dp runs in one process driving several replicas, but this process is one of 2", out + err)

    def test_dp_needs_its_replicas(self):
        code, out, err = run(small_training.command("--mode", "dp"), timeout=BOUND, env=ENV)
        self.assertNotEqual(code, 0, out + err)
        self.assertIn("--mode dp needs exactly one of --replicas K (CPU replicas) and --gpus LIST (CUDA devices)",
                      err)


if __name__ == "__main__":
    unittest.main()

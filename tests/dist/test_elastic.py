"""Elastic membership: `dptrain launch --nnodes MIN:MAX` on network-namespace nodes (netns.py), one
worker per node, running `dptrain train --resume auto --checkpoint-every 4`. A node whose launcher
is killed is left behind: the others re-form at the smaller world and continue from the last
checkpoint, keeping the global batch through gradient accumulation where it divides and rescaling
the learning rate where it does not (the log says which). A node started again is admitted at the
re-formation it asks for. A node whose link is cut is named by the heartbeat and left behind too.
Every run finishes its 2 epochs with exit code 0 on every live node."""

import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import unittest

from netns import Nodes
from proc import Started, dptrain

# ResNet-20 on 32 px images, batch 16 per process: 1536 images make 32 steps per epoch on 3
# processes, long enough (seconds) for a node to be killed and another to come back mid-run.
TRAIN = ["--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-val-size", "96", "-b", "16", "-j", "1",
         "--lr", "0.2", "--seed", "5", "--deterministic", "--epochs", "2", "-p", "1", "--resume", "auto",
         "--checkpoint-every", "4"]


class Node:
    """One node's launcher, its output (stdout and stderr) collected line by line as it comes."""

    def __init__(self, nodes, index, nnodes, output, train_size):
        os.makedirs(output, exist_ok=True)
        env = dict(os.environ, GLOO_SOCKET_IFNAME=nodes.dev[index])
        self.started = Started(nodes.run_in(index, [
            dptrain(), "launch", "--nnodes", nnodes, "--nproc-per-node", "1", "--max-restarts", "3",
            "--master-addr", nodes.addr[0], "--master-port", "29431", "--rdzv-last-call", "2",
            "--run-id", "elastic-test", "--", dptrain(), "train", *TRAIN, "--dummy-train-size", str(train_size),
            "--output", output]), env=env)
        self.lines = []
        self.readers = [threading.Thread(target=self._read, args=(stream,), daemon=True)
                        for stream in (self.started.proc.stdout, self.started.proc.stderr)]
        for reader in self.readers:
            reader.start()

    def _read(self, stream):
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def text(self):
        return "\n".join(self.lines)

    def wait_for(self, pattern, timeout):
        """The first match of `pattern` in this node's output, waiting up to `timeout` s for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            if self.started.proc.poll() is not None:
                time.sleep(0.2)  # the last lines
                found = re.search(pattern, self.text())
                if found:
                    return found
                break
            time.sleep(0.05)
        raise AssertionError(f"no '{pattern}' within {timeout} s; the node printed:\n{self.text()}")

    def kill(self):
        os.kill(self.started.proc.pid, signal.SIGKILL)  # the launcher; its worker dies with it
        self.started.proc.wait(timeout=30)

    def finish(self, timeout):
        code = self.started.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=10)
        return code


class Elastic(unittest.TestCase):
    def setUp(self):
        self.output = tempfile.mkdtemp(prefix="dpt-elastic-")
        self.running = []
        self.nodes = None

    def tearDown(self):
        for node in self.running:
            node.started.close()
        if self.nodes:
            self.nodes.close()
        shutil.rmtree(self.output, ignore_errors=True)

    def start(self, index, nnodes, train_size, output=None):
        node = Node(self.nodes, index, nnodes, output or self.output, train_size)
        self.running.append(node)
        return node

    def finished(self, node):
        code = node.finish(timeout=200)
        self.assertEqual(code, 0, node.text())
        final = json.loads(re.findall(r"^\[rank 0\] (\{.*\})$", node.text(), re.M)[-1])
        self.assertEqual(final["epochs"], 2, node.text())
        return final

    def test_two_nodes_lose_one_and_keep_the_global_batch(self):
        self.nodes = Nodes(2)
        host, other = self.start(0, "1:2", 768), self.start(1, "1:2", 768)
        host.wait_for(r"\[rank 0\] Epoch: \[0\]\[ 6/24\]", timeout=120)
        other.kill()
        # Alone, the host resumes from step 4's checkpoint with two micro-batches of 16 per step.
        host.wait_for(r"round 1: 1 node\(s\)", timeout=60)
        resumed = host.wait_for(r"world size 2 -> 1: the global batch stays 32 through 2 accumulation step\(s\) per "
                                r"optimizer step; the learning rate is unchanged; the rest of epoch 0 \(from sample "
                                r"(\d+)\) is re-sharded over 1 process\(es\)", timeout=60)
        self.assertEqual(int(resumed[1]) % 128, 0, "a checkpoint every 4 steps of 32 samples")
        self.assertIn("batch 16 per process x 2 accumulation steps (32 global)", host.text())
        final = self.finished(host)
        self.assertEqual(final["global_step"], 48)

    def test_a_node_gone_silent_is_named_by_the_heartbeat_and_left_behind(self):
        # Node 1's link cut: no connection closes, so without the heartbeat rank 0 would wait in a
        # collective for --dist-timeout (half an hour by default). Rank 0's heartbeat names rank 1
        # within its bound and exits; the host re-forms alone and finishes from the checkpoint.
        self.nodes = Nodes(2)
        host, other = self.start(0, "1:2", 768), self.start(1, "1:2", 768)
        host.wait_for(r"\[rank 0\] Epoch: \[0\]\[ 6/24\]", timeout=120)
        self.nodes.cut(1)
        host.wait_for(r"rank 0: rank 1 \(\S+, pid \d+\) sent no heartbeat for [\d.]+ s \(the bound: 3 step times of "
                      r"[\d.]+ s \+ 2 s\) while the rendezvous store at \S+ kept answering", timeout=60)
        host.wait_for(r"round 1: 1 node\(s\)", timeout=60)
        final = self.finished(host)
        self.assertEqual(final["global_step"], 48)
        with open(os.path.join(self.output, "metrics.jsonl")) as metrics:
            rounds = [r for r in map(json.loads, metrics) if r["phase"] == "membership"]
        self.assertEqual([(r["round"], r["world_size_before"], r["world_size"]) for r in rounds], [(1, 2, 1)])
        self.assertTrue(rounds[0]["cause"].startswith("rank 0 exited with code 1: rank 0: exiting (status 1)"),
                        rounds[0])

    def test_a_node_without_a_shared_disk_receives_the_checkpoint_it_lacks(self):
        # Each node its own --output, as machines without a shared disk: rank 0 writes every
        # checkpoint on node 0. Node 1, killed and started again, is admitted at a re-formation
        # with an empty folder; its rank receives rank 0's checkpoint (and keeps a copy) instead of
        # starting over while rank 0 resumes, and both finish together.
        self.nodes = Nodes(2)
        folders = [os.path.join(self.output, f"node{i}") for i in range(2)]
        host, other = self.start(0, "1:2", 768, folders[0]), self.start(1, "1:2", 768, folders[1])
        host.wait_for(r"\[rank 0\] Epoch: \[0\]\[ 6/24\]", timeout=120)
        other.kill()
        host.wait_for(r"round 1 formed with 1 node\(s\)", timeout=60)
        self.assertEqual(os.listdir(folders[1]), [])
        back = self.start(1, "1:2", 768, folders[1])
        received = back.wait_for(r"\[rank 1\] rank 1: resuming from the checkpoint of rank 0 \(global step (\d+)\), "
                                 r"which this rank's folder lacked; a copy is in (\S+) \(([\d.]+) MB received in "
                                 r"[\d.]+ s, [\d.]+ Gbit/s\)", timeout=120)
        self.assertEqual(received[2], os.path.join(folders[1], "checkpoint.pt"))
        host.wait_for(rf"\[rank 0\] resuming from .*checkpoint\.pt \(.*global step {received[1]}\)", timeout=60)
        final = self.finished(host)
        self.assertEqual(back.finish(timeout=60), 0, back.text())
        self.assertEqual(final["epochs"], 2)
        self.assertAlmostEqual(os.path.getsize(received[2]) / 1e6, float(received[3]), delta=0.051)  # (.1f MB)

    def test_three_nodes_lose_one_then_admit_it_again(self):
        self.nodes = Nodes(3)
        nodes = [self.start(i, "2:3", 1536) for i in range(3)]
        nodes[0].wait_for(r"round 0 formed with 3 node\(s\)", timeout=120)
        nodes[0].wait_for(r"\[rank 0\] Epoch: \[0\]\[ 6/32\]", timeout=120)
        nodes[2].kill()
        # 48 samples per step do not split into 2 processes of 16: the batch and the rate shrink.
        shrunk = nodes[0].wait_for(r"world size 3 -> 2: a global batch of 48 does not split into 2 process\(es\) "
                                   r"x 16, so it becomes 32 and the learning rate is rescaled by 32/48: "
                                   r"([0-9.e-]+) -> ([0-9.e-]+)", timeout=90)
        self.assertAlmostEqual(float(shrunk[2]) / float(shrunk[1]), 32 / 48, places=5)
        nodes[0].wait_for(r"round 1: 2 node\(s\)", timeout=5)
        back = self.start(2, "2:3", 1536)
        # It waits for the next round and asks for it; the two stop on request (a checkpoint) and
        # all three re-form, back at the first batch and rate.
        back.wait_for(r"waiting for round 2", timeout=60)
        grown = nodes[0].wait_for(r"world size 2 -> 3: a global batch of 32 does not split into 3 process\(es\) "
                                  r"x 16, so it becomes 48 and the learning rate is rescaled by 48/32: "
                                  r"([0-9.e-]+) -> ([0-9.e-]+)", timeout=90)
        self.assertAlmostEqual(float(grown[2]), float(shrunk[1]), places=6)
        self.assertIn("round 2: 3 node(s)", nodes[0].text())
        self.assertIn("stopping on request", nodes[0].text())
        self.finished(nodes[0])
        for node in (nodes[1], back):
            self.assertEqual(node.finish(timeout=60), 0, node.text())


if __name__ == "__main__":
    unittest.main()

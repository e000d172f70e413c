"""Two "nodes" on one machine (network namespaces, see netns.py), one `dptrain launch`
in each (--nnodes 2 --node-rank 0/1), the master in the first, collectives across the link; with
two ranks on each node the float all_reduce is hierarchical (shared memory within each node, the
nodes' leaders across the link) unless turned off.
Needs root and iproute2; skips, saying why, where namespaces cannot be made."""

import os
import tempfile
import unittest

import torch

from netns import Nodes
from proc import Started, dptrain, env_with


class TwoNodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.nodes = Nodes(2)
        cls.addr, cls.dev = cls.nodes.addr, cls.nodes.dev

    @classmethod
    def tearDownClass(cls):
        cls.nodes.close()

    def run_nodes(self, port, program, env=None, timeout=120):
        """`program` as two ranks on each node; each node's (code, out, err), or fails with them."""
        nodes = [Started(self.nodes.run_in(index, [
            dptrain(), "launch", "--nnodes", "2", "--node-rank", str(index), "--nproc-per-node", "2", "--master-addr",
            self.addr[0], "--master-port", str(port), "--", *program]),
            env=env_with(GLOO_SOCKET_IFNAME=self.dev[index], **(env or {}))) for index in (0, 1)]
        try:
            results = [n.wait(timeout=timeout) for n in nodes]
        finally:
            for n in nodes:
                n.close()
        for index, (code, out, err) in enumerate(results):
            self.assertEqual(code, 0, f"node {index}:\n{out}\n{err}")
        return results

    def check_collectives(self, port, env, transport):
        results = self.run_nodes(port, [dptrain(), "check", "--timeout", "60"], env)
        for index, (_, out, _) in enumerate(results):
            for rank in (2 * index, 2 * index + 1):
                self.assertIn(f"[rank {rank}] rank {rank}/4: 11 collectives correct on {transport} (", out)
                self.assertIn(f"(local {rank % 2}/2, node {index})", out)
        self.assertIn(f"master {self.addr[0]}:{port}", results[1][1])

    def test_collectives_across_the_link(self):
        self.check_collectives(29400, {}, "gloo + hierarchical (2 machines x 2 ranks)")

    def test_collectives_across_the_link_flat_when_turned_off(self):
        self.check_collectives(29401, {"DPTRAIN_HIERARCHICAL": "0"}, "gloo")

    def test_training_hierarchical_matches_flat_within_rounding(self):
        """One step of the same run, hierarchical and flat: the transport each says, and weights apart
        by float rounding only (the gradients' sums differ in order: 1.5e-8 here). One step, since
        training magnifies any difference (from 1.5e-8 to 1.6e-5 in a second step, 3e-3 by the
        fourth, as it does between any two orders of summation). The negative control: the step's
        update of every weight tensor (the learning rate times its gradient, the momentum buffer
        after one step) is far larger than the tolerance, so a step that lost a node's gradients
        would land outside it."""
        lr, tolerance = 0.2, 1e-6
        args = ["train", "--dummy", "-a", "resnet20", "--image-size", "32", "--dummy-train-size", "64",
                "--dummy-val-size", "64", "-b", "16", "-j", "1", "--lr", str(lr), "--seed", "3", "--deterministic",
                "--epochs", "1", "-p", "1"]
        checkpoints = []
        with tempfile.TemporaryDirectory() as tmp:
            for port, (transport, flags) in enumerate({"gloo + hierarchical (2 machines x 2 ranks)": [],
                                                       "gloo": ["--no-hierarchical-allreduce"]}.items(), start=29402):
                output = os.path.join(tmp, str(port))
                results = self.run_nodes(port, [dptrain(), *args, "--output", output, *flags], timeout=240)
                self.assertIn(f" over {transport}\n", results[0][1])
                checkpoints.append(torch.load(os.path.join(output, "checkpoint.pt")))
        ours, theirs = checkpoints
        gaps = {k: (v - theirs["state_dict"][k]).abs().max().item()
                for k, v in ours["state_dict"].items() if v.is_floating_point()}
        self.assertLessEqual(max(gaps.values()), tolerance, max(gaps, key=gaps.get))
        updates = [lr * state["momentum_buffer"].abs().max().item() for state in theirs["optimizer"]["state"].values()]
        self.assertEqual(len(updates), sum(len(g["params"]) for g in theirs["optimizer"]["param_groups"]))
        self.assertGreater(min(updates), 100 * tolerance)

if __name__ == "__main__":
    unittest.main()

"""dptrain's DistributedDataParallel against Python PyTorch's: two real processes each, gloo, the
same initial weights and data, 20 SGD steps with momentum and weight decay; the final weights
(and batch norm's running statistics) must agree within 1e-5; each has moved by more than 1e-3."""

import os
import tempfile
import unittest

import torch

from proc import PYTHON, Started, env_with, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 2


def oracle_program(name="dptrain_ddp_oracle"):
    """A program of the build's bin/ (DPT_BUILD, else build/)."""
    root = os.path.dirname(os.path.dirname(HERE))
    path = os.path.join(os.environ.get("DPT_BUILD", os.path.join(root, "build")), "bin", name)
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} not found: build the {name} target, or set DPT_BUILD")
    return path


def run_world(args, timeout=120, expected_code=0):
    """Starts WORLD ranks of `args` with the torchrun variables; all must exit with `expected_code`
    within `timeout`. Returns (code, stdout, stderr) per rank."""
    port = free_port()
    ranks = [Started(args, env=env_with(RANK=r, LOCAL_RANK=r, WORLD_SIZE=WORLD, LOCAL_WORLD_SIZE=WORLD,
                                         MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS=1))
             for r in range(WORLD)]
    try:
        results = [r.wait(timeout) for r in ranks]
    finally:
        for r in ranks:
            r.close()
    for rank, (code, out, err) in enumerate(results):
        if code != expected_code:
            raise AssertionError(f"rank {rank} of {args} exited with {code}\nstdout:\n{out}\nstderr:\n{err}")
    return results


class DistributedDataParallelOracle(unittest.TestCase):
    def test_same_weights_as_pytorch_ddp_after_twenty_steps(self):
        with tempfile.TemporaryDirectory() as out:
            results = run_world([oracle_program(), out])
            for rank, (_, stdout, _) in enumerate(results):
                self.assertIn(f"rank {rank}: trained 20 steps in 3 buckets", stdout)
            run_world([PYTHON, os.path.join(HERE, "workers", "torch_ddp.py"), out])
            initial = torch.load(os.path.join(out, "initial.pt"))
            ours = torch.load(os.path.join(out, "final.pt"))
            theirs = torch.load(os.path.join(out, "python_final.pt"))
        self.assertEqual(sorted(ours), ["0.bias", "0.weight", "3.bias", "3.weight"])
        self.assertEqual(sorted(ours), sorted(theirs))
        for name in ours:
            moved = (ours[name] - initial[name]).abs().max().item()
            self.assertGreater(moved, 1e-3, f"{name} did not train")
            difference = (ours[name] - theirs[name]).abs().max().item()
            self.assertLessEqual(difference, 1e-5, f"{name}: dptrain and PyTorch DDP differ by {difference}")


    def test_scripted_model_trains_like_pytorch_ddp(self):
        # A model with batch norm (DDP broadcasts its buffers), scripted in Python, trained by
        # dptrain as -a torchscript:PATH trains it; Python's DDP trains the eager model.
        torch.manual_seed(5)
        eager = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))
        with tempfile.TemporaryDirectory() as out:
            scripted = os.path.join(out, "scripted.pt")
            torch.jit.script(eager).save(scripted)
            results = run_world([oracle_program(), out, "--torchscript", scripted])
            for rank, (_, stdout, _) in enumerate(results):
                self.assertIn(f"rank {rank}: trained 20 steps in", stdout)
            run_world([PYTHON, os.path.join(HERE, "workers", "torch_ddp.py"), out, "--batch-norm"])
            initial = torch.load(os.path.join(out, "initial.pt"))
            ours = torch.load(os.path.join(out, "final.pt"))
            theirs = torch.load(os.path.join(out, "python_final.pt"))
        # The parameters and batch norm's buffers: DDP broadcasts rank 0's running statistics at
        # every forward, so both sides' rank 0 must hold the same ones after the same 20 steps.
        self.assertEqual(sorted(ours), ["0.weight", "1.bias", "1.num_batches_tracked", "1.running_mean",
                                        "1.running_var", "1.weight", "4.bias", "4.weight"])
        self.assertEqual(sorted(ours), sorted(theirs))
        self.assertEqual(ours["1.num_batches_tracked"].item(), 20)
        self.assertEqual(theirs["1.num_batches_tracked"].item(), 20)
        for name in ours:
            self.assertTrue(torch.equal(initial[name], eager.state_dict()[name]), name)
            if name.endswith("num_batches_tracked"):
                continue
            moved = (ours[name].double() - initial[name].double()).abs().max().item()
            self.assertGreater(moved, 1e-3, f"{name} did not train")
            difference = (ours[name] - theirs[name]).abs().max().item()
            self.assertLessEqual(difference, 1e-5, f"{name}: dptrain and PyTorch DDP differ by {difference}")

    def test_zero_trains_like_pytorch_zero_redundancy_optimizer(self):
        # AdamW sharded over the two ranks on both sides (ZeroRedundancyOptimizer): the weights,
        # and the whole optimizer state that each side gathers on rank 0, agree.
        with tempfile.TemporaryDirectory() as out:
            run_world([oracle_program(), out, "--zero"])
            run_world([PYTHON, os.path.join(HERE, "workers", "torch_ddp.py"), out, "--zero"])
            initial = torch.load(os.path.join(out, "initial.pt"))
            ours, theirs = torch.load(os.path.join(out, "final.pt")), torch.load(os.path.join(out, "python_final.pt"))
            our_state = torch.load(os.path.join(out, "optimizer.pt"))
            their_state = torch.load(os.path.join(out, "python_optimizer.pt"))
        self.assertEqual(sorted(ours), sorted(theirs))
        for name in ours:
            moved = (ours[name] - initial[name]).abs().max().item()
            self.assertGreater(moved, 1e-3, f"{name} did not train")
            difference = (ours[name] - theirs[name]).abs().max().item()
            self.assertLessEqual(difference, 1e-5, f"{name}: dptrain and PyTorch's ZeRO differ by {difference}")
        # The state of the 4 parameters, numbered as one AdamW over them numbers them; each moment
        # within 1e-4 of its own size, far from where 20 steps moved it.
        self.assertEqual(sorted(our_state["state"]), [0, 1, 2, 3])
        self.assertEqual(sorted(their_state["state"]), [0, 1, 2, 3])
        self.assertEqual([g["params"] for g in our_state["param_groups"]], [[0, 1, 2, 3]])
        for index, entry in our_state["state"].items():
            theirs_entry = their_state["state"][index]
            self.assertEqual(float(entry["step"]), 20.0)
            self.assertEqual(float(theirs_entry["step"]), 20.0)
            for key in ("exp_avg", "exp_avg_sq"):
                size = entry[key].abs().max().item()
                self.assertGreater(size, 0.0, f"{index}.{key} never moved")
                difference = (entry[key] - theirs_entry[key]).abs().max().item()
                self.assertLessEqual(difference, 1e-4 * size, f"{index}.{key}: differs by {difference} of {size}")

    def test_different_models_fail_on_every_rank_with_the_difference(self):
        with tempfile.TemporaryDirectory() as out:
            results = run_world([oracle_program(), out, "--mismatch"], timeout=60, expected_code=2)
        for rank, (_, _, err) in enumerate(results):
            self.assertIn(f"rank {rank}: DistributedDataParallel: the model differs between rank 0 and rank 1 "
                          "(4 vs 4 parameters and buffers). First difference, entry 2: rank 0 has parameter "
                          "'3.weight' of shape [5, 144] and dtype Float, rank 1 has parameter '3.weight' of shape "
                          "[6, 144] and dtype Float. Build the same model on every rank", err)


if __name__ == "__main__":
    unittest.main()

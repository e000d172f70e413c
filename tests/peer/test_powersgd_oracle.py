"""dptrain's PowerSGD hook against Python PyTorch's powerSGD_hook: two real processes each, gloo,
three buckets of gradients (each rank its own) over 6 steps, the first 2 plain allreduces. With the
same seed, every bucket after every step agrees within 1e-5 (float rounding: the same kernels run
on both sides; on LibTorch 1.13 the results are bitwise equal); with another seed (Python's) the compressed steps differ by more than 0.05, so the
tolerance tells a wrong random start, layout or order apart. Ranks 1 (Gram-Schmidt) and 4 (QR)."""

import os
import tempfile
import unittest

import torch

from proc import PYTHON
from test_ddp_oracle import oracle_program, run_world

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 2
START_ITER = 2
STEPS = 6


class PowerSGDOracle(unittest.TestCase):
    def check_rank(self, matrix_rank):
        seed = 7
        with tempfile.TemporaryDirectory() as out:
            results = run_world([oracle_program("dptrain_powersgd_oracle"), out, str(matrix_rank), str(START_ITER),
                                 str(seed)])
            for rank, (_, stdout, _) in enumerate(results):
                self.assertIn(f"rank {rank}: {STEPS} steps, iteration {STEPS}", stdout)
            worker = os.path.join(HERE, "workers", "torch_powersgd.py")
            for python_seed in (seed, seed + 1):
                run_world([PYTHON, worker, out, str(matrix_rank), str(START_ITER), str(python_seed)])
            ours = [torch.load(os.path.join(out, f"ours.{r}.pt")) for r in range(WORLD)]
            theirs = [torch.load(os.path.join(out, f"theirs.{seed}.{r}.pt")) for r in range(WORLD)]
            other_seed = [torch.load(os.path.join(out, f"theirs.{seed + 1}.{r}.pt")) for r in range(WORLD)]
            inputs = [torch.load(os.path.join(out, f"input.{r}.pt")) for r in range(WORLD)]
        self.assertEqual(len(ours[0]), 3 * STEPS)
        for r in range(WORLD):
            self.assertEqual(sorted(ours[r]), sorted(theirs[r]))
            for key in ours[r]:
                difference = (ours[r][key] - theirs[r][key]).abs().max().item()
                self.assertLessEqual(difference, 1e-5, f"rank {r}, {key}: dptrain and PyTorch differ by {difference}")
        # Plain allreduce first: the mean of the two ranks' gradients, bucket 0 at step 0.
        mean = (inputs[0]["b0.g0"][0] + inputs[1]["b0.g0"][0]) / 2
        self.assertTrue(torch.allclose(ours[0]["b0.s0"][:320].view(10, 32), mean, atol=1e-6))
        for step in range(START_ITER, STEPS):
            key = f"b1.s{step}"
            # Compressed: the ranks agree on the compressed tensors, and it is not the mean any more ...
            self.assertLessEqual((ours[0][key] - ours[1][key]).abs().max().item(), 1e-5)
            # ... and another seed's random start gives results outside the tolerance.
            for r in range(WORLD):
                self.assertGreater((other_seed[r][key] - theirs[r][key]).abs().max().item(), 0.05, key)

    def test_rank_1_gram_schmidt(self):
        self.check_rank(1)

    def test_rank_4_qr(self):
        self.check_rank(4)


if __name__ == "__main__":
    unittest.main()

"""scripts/gpu-check on a machine without a GPU: it says so and exits 2 within seconds, having
built nothing; and before that it refuses an --only name that is none of its steps, so that a
misspelt rerun does not spend a lease's minutes on nothing."""

import os
import shutil
import tempfile
import unittest

from proc import run

SCRIPT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu-check"))
NO_GPU = "no CUDA GPU here"


def gpu_check(*args, cwd=None):
    """(exit code, stdout, stderr) of scripts/gpu-check, bounded at 60 s."""
    return run([SCRIPT, *args], timeout=60, cwd=cwd)


class GpuCheckWithoutAGpu(unittest.TestCase):
    def setUp(self):
        if shutil.which("nvidia-smi"):
            self.skipTest("this machine has nvidia-smi: its GPU path is what gpu-check checks")

    def test_says_so_and_exits_2(self):
        with tempfile.TemporaryDirectory(prefix="dpt_gpu_check_") as tmp:
            out_dir = os.path.join(tmp, "out")
            code, out, err = gpu_check("--out", out_dir)
            self.assertEqual(code, 2, err)
            self.assertIn(NO_GPU, out)
            self.assertFalse(os.path.exists(out_dir))  # nothing made, nothing built

    def test_takes_the_names_of_its_steps(self):
        # Steps of both kinds (step, trained), and those whose lines start otherwise.
        code, out, err = gpu_check("--only", "configure,build,link_order,cuda_suite,bench_gpu,demo,unit_suite")
        self.assertEqual(code, 2, err)
        self.assertIn(NO_GPU, out)  # past the names, stopped by the missing GPU

    def test_refuses_a_name_that_is_no_step_first(self):
        for wrong in ("bench-gpu", "bench", "gpu"):
            with self.subTest(wrong=wrong):
                code, out, err = gpu_check("--only", f"configure,{wrong}", cwd=os.path.dirname(SCRIPT))
                self.assertEqual(code, 2)
                self.assertIn(f"--only {wrong}: no such step", err)
                self.assertNotIn(NO_GPU, out)


if __name__ == "__main__":
    unittest.main()

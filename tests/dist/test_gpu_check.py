"""scripts/gpu-check on a machine without a GPU: it says so and exits 2 within seconds, having
built nothing; and before that it refuses an --only name that is none of its steps, so that a
misspelt rerun does not spend a lease's minutes on nothing. And scripts/gtest-no-skips, through
which gpu-check runs the CUDA suite: a suite with a skipped test fails, naming it and why."""

import os
import shutil
import tempfile
import unittest

from proc import run

SCRIPT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu-check"))
NO_SKIPS = os.path.join(os.path.dirname(SCRIPT), "gtest-no-skips")
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


# What a gtest binary prints, less the timing lines, for a run with `results`: (name, outcome, reason).
def fake_gtest(results, exit_code):
    lines = ["[==========] Running %d tests from 1 test suite." % len(results)]
    for name, outcome, reason in results:
        lines.append("[ RUN      ] " + name)
        if reason:
            lines.append("tests/unit/dist/nccl_communicator_test.cpp:45: Skipped")
            lines.append(reason)
        lines.append("[%s] %s (1 ms)" % ({"ok": "       OK ", "skipped": "  SKIPPED ", "failed": "  FAILED  "}[outcome],
                                        name))
    lines.append("[  PASSED  ] %d tests." % sum(outcome == "ok" for _, outcome, _ in results))
    text = "\n".join(lines) + "\n"
    return ["bash", "-c", 'printf "%s" "$1"; exit "$2"', "gtest", text, str(exit_code)]


class GtestNoSkips(unittest.TestCase):
    NCCL = "NcclCommunicator.EveryCollectiveOnTheVisibleGpusGivesTheSumOverRanks_CUDA"

    def test_a_skipped_test_fails_the_run_naming_it_and_why(self):
        reason = "one visible GPU: NCCL's collectives need two ranks on two GPUs to be proven, so none was"
        code, out, err = run([NO_SKIPS, *fake_gtest([("BackendChoice.Auto_CUDA", "ok", None),
                                                     (self.NCCL, "skipped", reason)], 0)], timeout=30)
        self.assertEqual(code, 3, out + err)
        self.assertIn("1 test(s) skipped, so this run proves nothing of them", out)
        self.assertIn(f"  {self.NCCL}: {reason}", out)

    def test_a_run_without_skips_passes_and_a_failure_keeps_its_status(self):
        code, out, err = run([NO_SKIPS, *fake_gtest([(self.NCCL, "ok", None)], 0)], timeout=30)
        self.assertEqual(code, 0, out + err)
        self.assertIn("[       OK ] " + self.NCCL, out)  # the program's output passes through
        code, out, err = run([NO_SKIPS, *fake_gtest([(self.NCCL, "failed", None)], 1)], timeout=30)
        self.assertEqual(code, 1, out + err)


if __name__ == "__main__":
    unittest.main()

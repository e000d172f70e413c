"""`dptrain bench-loader`'s report, which bench/loader and scripts/gpu-check read: the images it
counted, and the figures that say why loader threads scale as they do where they fall short
(busy_fraction: the CPU time over the threads' wall time; the kernel's part; faults, switches)."""

import json
import os
import tempfile
import unittest

from proc import dptrain, run

IMAGES = 96
EPOCHS = 4
BATCH = 10  # not a divisor of IMAGES: a pass's end would leave a short batch


def bench_report(root, threads, cpus=None):
    """bench-loader's JSON line for `threads` threads, the process held to `cpus` when given."""
    args = [dptrain(), "bench-loader", root, "--threads", str(threads), "--epochs", str(EPOCHS),
            "--batch-size", str(BATCH), "--size", "32"]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    code, out, err = run(args, timeout=120, preexec_fn=pin)
    if code != 0:
        raise AssertionError(f"bench-loader failed ({code}):\n{out}\n{err}")
    return json.loads(out.strip().splitlines()[-1])


class BenchLoaderReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="dpt_bench_loader_")
        code, out, err = run([dptrain(), "make-dataset", cls.dir.name, "--train-size", str(IMAGES), "--val-size", "10",
                              "--image-size", "48"], timeout=120)
        if code != 0:
            raise AssertionError(f"make-dataset failed ({code}):\n{out}\n{err}")
        cls.root = os.path.join(cls.dir.name, "train")

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def assert_consistent(self, report, threads):
        self.assertEqual(report["threads"], threads)
        self.assertEqual(report["epochs"], EPOCHS)
        self.assertEqual(report["images"], IMAGES * EPOCHS)  # the timed passes, not the warm-up
        # One stream over the passes, as the middle of a long epoch: 39 batches, the last of 4
        # images, where a loader per pass would end each pass with a short batch (40 batches).
        self.assertEqual(report["batches"], -(-IMAGES * EPOCHS // BATCH))
        self.assertNotEqual(report["batches"], EPOCHS * -(-IMAGES // BATCH))
        self.assertEqual(report["skipped"], 0)
        cpu = report["cpu_seconds"]
        self.assertGreater(cpu, 0)
        self.assertAlmostEqual(report["user_seconds"] + report["system_seconds"], cpu, places=9)
        self.assertAlmostEqual(report["img_per_cpu_s"] * cpu, report["images"], places=6)
        self.assertAlmostEqual(report["busy_fraction"] * threads * report["seconds"], cpu, places=9)
        for count in ("minor_faults", "voluntary_switches", "involuntary_switches"):
            self.assertIsInstance(report[count], int)
            self.assertGreaterEqual(report[count], 0)

    def test_counts_the_timed_passes_and_their_cpu_time(self):
        report = bench_report(self.root, 2)
        self.assert_consistent(report, 2)
        # The process's CPU time over two threads' wall time: at most both threads all the time
        # (the consumer thread adds little).
        self.assertLessEqual(report["busy_fraction"], 1.1)

    def test_threads_sharing_one_cpu_are_at_most_half_busy(self):
        # Two threads held to one CPU compute at most half of their wall time between them, what
        # busy_fraction must show (a figure of one thread's time, or of the wall time alone, would
        # not): the reading of threads that wait for a core.
        report = bench_report(self.root, 2, cpus={min(os.sched_getaffinity(0))})
        self.assert_consistent(report, 2)
        self.assertLessEqual(report["busy_fraction"], 0.55)


if __name__ == "__main__":
    unittest.main()

"""`dptrain bench-ddp` under the launcher: its report, which bench/ddp and bench/ddp_net read,
describes the run it measured (a small model, so it takes about a second)."""

import json
import unittest

from proc import dptrain, run

STEPS = 3
BATCH = 4


def bench_report(*extra):
    args = [dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", dptrain(), "bench-ddp",
            "--arch", "resnet20", "--image-size", "32", "--batch-size", str(BATCH), "--steps", str(STEPS),
            "--warmup", "1", "--bucket-cap-mb", "0.25", "--last-bucket-cap-mb", "0.05", *extra]
    code, out, err = run(args, timeout=120)
    if code != 0:
        raise AssertionError(f"bench-ddp failed ({code}):\n{out}\n{err}")
    reports = [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[rank 0] {")]
    if len(reports) != 1:
        raise AssertionError(f"expected one report from rank 0:\n{out}")
    return json.loads(reports[0])


class BenchDdpReport(unittest.TestCase):
    def test_buckets_and_steps_add_up(self):
        report = bench_report("--overlap", "--allreduce-repeats", "1")
        self.assertEqual(report["world_size"], 2)
        self.assertEqual(report["transport"], "gloo + shared memory")
        # ResNet-20 (identity shortcuts) with 1000 classes: 269,072 + 65,000 float parameters,
        # over several buckets.
        self.assertGreater(report["buckets"], 2)
        self.assertEqual(len(report["bucket_mb"]), report["buckets"])
        self.assertAlmostEqual(sum(report["bucket_mb"]), (269072 + 65000) * 4 / 2**20, places=9)
        self.assertAlmostEqual(report["allreduce_mb"], sum(report["bucket_mb"]), places=9)
        # Buckets leave in launch order, during backward and before the wait for them begins.
        launches = report["bucket_launch_ms"]
        self.assertEqual(len(launches), report["buckets"])
        self.assertEqual(launches, sorted(launches))
        self.assertGreaterEqual(launches[0], 0)
        self.assertLessEqual(launches[-1], report["backward_ms"] - report["comm_wait_ms"] + 1e-6)
        # Throughput is the images of every rank over the synchronized steps' time.
        self.assertEqual(len(report["each_step_ms"]), STEPS)
        self.assertEqual(len(report["each_no_sync_step_ms"]), STEPS)
        seconds = sum(report["each_step_ms"]) / 1000
        self.assertAlmostEqual(report["img_s"], STEPS * BATCH * 2 / seconds, delta=1e-6 * report["img_s"])
        self.assertAlmostEqual(report["step_ms"], 1000 * seconds / STEPS, delta=1e-6 * report["step_ms"])


if __name__ == "__main__":
    unittest.main()

"""Installs the build into a temporary prefix and builds and runs a separate project that finds it
with find_package(dptrain)."""

import os
import tempfile
import unittest

from proc import env_with, run

HERE = os.path.dirname(os.path.abspath(__file__))


class FindPackage(unittest.TestCase):
    def test_installed_library_builds_and_runs_in_another_project(self):
        build = os.environ["DPT_BUILD"]
        with tempfile.TemporaryDirectory() as tmp:
            prefix, consumer = os.path.join(tmp, "prefix"), os.path.join(tmp, "consumer")
            for args in (["cmake", "--install", build, "--prefix", prefix],
                         ["cmake", "-S", os.path.join(HERE, "consumer"), "-B", consumer, "-G", "Ninja",
                          f"-DCMAKE_PREFIX_PATH={prefix}"],
                         ["cmake", "--build", consumer]):
                code, out, err = run(args, timeout=600)
                self.assertEqual(code, 0, f"{' '.join(args)}\n{out}\n{err}")
            self.assertTrue(os.access(os.path.join(prefix, "bin", "dptrain"), os.X_OK))
            code, out, err = run([os.path.join(consumer, "consumer")], timeout=60,
                                 env=env_with(RANK=1, WORLD_SIZE=2, MASTER_ADDR="10.9.8.7"))
            self.assertEqual(code, 0, err)
            self.assertEqual(out.strip(), "rank 1/2 (local 1/2, node 0) from torchrun environment, "
                                          "master 10.9.8.7:29500; second worker is rank 1")


if __name__ == "__main__":
    unittest.main()

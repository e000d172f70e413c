"""examples/python/imagenet_ddp.py (pytorch/examples' ImageNet script with dptrain's loader) trains
under `dptrain launch` on 2 processes, and the package installs where Python finds it."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from module_path import import_dptrain  # noqa: E402
from proc import PYTHON, dptrain, run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "python", "imagenet_ddp.py")


class PythonExample(unittest.TestCase):
    def test_learns_the_synthetic_set_on_two_processes(self):
        package = os.path.dirname(os.path.dirname(import_dptrain().__file__))
        env = dict(os.environ, PYTHONPATH=package, OMP_NUM_THREADS="1")
        code, out, err = run([dptrain(), "launch", "--standalone", "--nproc-per-node", "2", "--", PYTHON, EXAMPLE,
                              "--dummy", "-a", "resnet18", "--image-size", "32", "--epochs", "3", "-b", "64", "-j",
                              "1", "-p", "100"], timeout=240, env=env)
        self.assertEqual(code, 0, out + err)
        summary = json.loads(out.strip().splitlines()[-1].split("] ", 1)[-1])
        self.assertEqual(summary["world_size"], 2)
        # Every one of the 200 validation images counted once over the two ranks.
        self.assertEqual(summary["validated"], 200)
        # Chance is 10%: three epochs of the synthetic set reach about 90% (the bar is far from
        # both).
        self.assertGreater(summary["top1"], 60.0, out)
        self.assertIn("loader dptrain", out)


class Install(unittest.TestCase):
    def test_cmake_install_puts_an_importable_package_where_python_looks(self):
        build = os.path.dirname(os.path.dirname(os.path.dirname(import_dptrain().__file__)))
        with tempfile.TemporaryDirectory() as prefix:
            subprocess.run(["cmake", "--install", build, "--component", "python", "--prefix", prefix], check=True,
                           capture_output=True, timeout=60)
            found = subprocess.run(
                [PYTHON, "-c", "import site, sys; sys.prefix = sys.exec_prefix = sys.argv[1]; "
                 "print('\\n'.join(site.getsitepackages([sys.argv[1]])))", prefix],
                capture_output=True, text=True, timeout=60, check=True).stdout.split()
            folders = [f for f in found if os.path.isdir(os.path.join(f, "dptrain"))]
            self.assertEqual(len(folders), 1, (found, os.listdir(prefix)))
            imported = subprocess.run(
                [PYTHON, "-c", "import dptrain; print(dptrain.__file__); print(len(dptrain.DistributedSampler("
                 "range(10), 2, 0)))"], capture_output=True, text=True, timeout=60, cwd=prefix,
                env=dict(os.environ, PYTHONPATH=folders[0]))
            self.assertEqual(imported.returncode, 0, imported.stderr)
            self.assertTrue(imported.stdout.startswith(folders[0]), imported.stdout)
            self.assertEqual(imported.stdout.split()[-1], "5")


if __name__ == "__main__":
    unittest.main()

"""`dptrain --version` names dptrain's version as CMakeLists.txt's project() gives it, the LibTorch
it was built with (the one Python's torch on the same system is: Debian builds both from one
source), and whether CUDA and NCCL are in the build (not in the CPU builds the tests run)."""

import os
import re
import unittest

from proc import PYTHON, dptrain, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as cmake:
        return re.search(r"^project\(dptrain VERSION ([0-9.]+)", cmake.read(), re.MULTILINE).group(1)


class Version(unittest.TestCase):
    def test_names_dptrain_libtorch_cuda_and_nccl(self):
        code, out, err = run([PYTHON, "-c", "import torch; print(torch.__version__)"], timeout=120)
        self.assertEqual(code, 0, err)
        torch_release = re.match(r"[0-9]+\.[0-9]+\.[0-9]+", out.strip()).group(0)
        code, out, err = run([dptrain(), "--version"], timeout=60)
        self.assertEqual((code, err), (0, ""))
        self.assertRegex(out.strip(), rf"^dptrain {re.escape(project_version())} \(LibTorch "
                                      rf"{re.escape(torch_release)}[^,]*, CUDA: no, NCCL: no\)$")


if __name__ == "__main__":
    unittest.main()

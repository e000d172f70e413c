"""Imports the Python module of the build under test (${DPT_BUILD:-build}/python), or skips (fails
under CI) when that build has none."""

import os
import sys

from proc import cannot_run


def import_dptrain():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    package_root = os.path.join(os.environ.get("DPT_BUILD", os.path.join(root, "build")), "python")
    if not os.path.isdir(os.path.join(package_root, "dptrain")):
        cannot_run(f"no Python module in {package_root}: configure with pybind11-dev installed")
    if package_root not in sys.path:
        sys.path.insert(0, package_root)
    import dptrain
    return dptrain

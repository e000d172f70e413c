"""A bench/ script loaded as a module, for the tests of its bookkeeping: the scripts have no .py
suffix and import their neighbours in bench/ (common.py, imagenet_like.py)."""
import importlib.machinery
import importlib.util
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def load_bench_script(name):
    """bench/<name> as a module named bench_<name>."""
    sys.path.insert(0, BENCH)
    try:
        loader = importlib.machinery.SourceFileLoader("bench_" + name, os.path.join(BENCH, name))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_" + name, loader))
        loader.exec_module(module)
        return module
    finally:
        sys.path.remove(BENCH)

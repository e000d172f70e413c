"""What the benchmarks share: the dptrain they measure (${DPT_BUILD:-build}/bin/dptrain, from the
repository's root, and its Python module beside it) and the reading of its output."""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(ROOT, "tests"))  # after bench/: its modules keep their names
from proc import installed  # noqa: E402


def dptrain():
    """The dptrain CLI under ${DPT_BUILD:-build}; exits saying how to build it when it is missing."""
    path = os.path.join(os.environ.get("DPT_BUILD", os.path.join(ROOT, "build")), "bin", "dptrain")
    if not os.access(path, os.X_OK):
        sys.exit(f"{os.path.basename(sys.argv[0])}: {path} not found: build the dptrain_cli target, or set DPT_BUILD")
    return path


def python_module_root():
    """Where the build's Python module (import dptrain) is, or None when the build has none."""
    package_root = os.path.join(os.path.dirname(os.path.dirname(dptrain())), "python")
    return package_root if os.path.isdir(os.path.join(package_root, "dptrain")) else None


def python_module_env(base):
    """`base` with the build's Python module importable; exits saying how to build it when it is
    missing."""
    package_root = python_module_root()
    if package_root is None:
        sys.exit(f"{os.path.basename(sys.argv[0])}: the build has no Python module: build the dptrain_python target "
                 "(needs pybind11-dev and Python's headers)")
    return dict(base, PYTHONPATH=os.pathsep.join(p for p in (package_root, base.get("PYTHONPATH")) if p))


def last_json(text):
    """The JSON object a command printed as its last line (dptrain's commands end with one)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("no output")
    return json.loads(lines[-1])


# Runs the command after it and prints, last on its stderr, the largest resident set of any process
# it started (waited-for descendants included, so a launcher's workers count): a peak without sampling.
_PEAK_RSS = "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); " \
            "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); " \
            "sys.exit(code)"


def tool(name):
    """The path of the installed program `name` (tests/proc.py's installed: /usr/sbin too); exits
    naming it when it is not installed."""
    path = installed(name)
    if path is None:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {name} is not installed (scripts/install-deps installs it)")
    return path


def measuring_peak_rss(command):
    """`command` run so that its stderr ends with its largest process's peak RSS (see peak_rss_mb)."""
    return [sys.executable, "-c", _PEAK_RSS, *command]


def peak_rss_mb(stderr):
    """The peak RSS in MB that a measuring_peak_rss command printed, 0.0 when it printed none."""
    peaks = re.findall(r"peak_rss_kb (\d+)", stderr)
    return int(peaks[-1]) / 1024 if peaks else 0.0


# Python source the peers (run with -c) start with: the ATen operations of one call of `step`, by
# name, counted as `dptrain bench-models --op-counts` counts them (operations called inside
# others too, on every thread the step uses: the profiler follows autograd's threads).
OPERATION_COUNTS = r"""
def operation_counts(step):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}
"""


def operation_differences(ours, theirs):
    """{name: [dptrain's count, Python's]} of the operations whose counts differ between the sides."""
    return {name: [ours.get(name, 0), theirs.get(name, 0)] for name in sorted(set(ours) | set(theirs))
            if ours.get(name, 0) != theirs.get(name, 0)}


def describe_differences(differences):
    """operation_differences' result in one line, for a benchmark's report."""
    listed = ", ".join(f"{name} {ours}/{theirs}" for name, (ours, theirs) in differences.items())
    return "operations that differ (dptrain / Python): " + (listed or "none")

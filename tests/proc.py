"""Process helpers for dptrain's multi-process tests: every wait is bounded, and every process a
test starts is ended by its PID (never by name) when the test is done."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

PYTHON = "/usr/bin/python3"  # Debian's, with torch


def dptrain():
    """The CLI under test: ${DPT_BUILD:-build}/bin/dptrain, relative to the repository root."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.environ.get("DPT_BUILD", os.path.join(root, "build"))
    path = os.path.join(build, "bin", "dptrain")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{path} not found: build first, or set DPT_BUILD")
    return path


def program(name):
    """Another program of the build under test, beside the CLI."""
    return os.path.join(os.path.dirname(dptrain()), name)


def installed(name):
    """The path of the installed program `name` (a server or tool a test or benchmark starts),
    looked for in /usr/sbin too: nginx lives there, and a user's PATH may leave it out. None when
    it is not installed."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))


def installed_for_test(name):
    """installed(name), or the test cannot run (a failure under CI) naming scripts/install-deps."""
    path = installed(name)
    if path is None:
        cannot_run(f"{name} is not installed (scripts/install-deps installs it)")
    return path


def children(pid):
    """The pids whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def descendants(root):
    """Every process below `root` in the process tree, parents before their children."""
    found, frontier = [], [root]
    while frontier:
        below = children(frontier.pop(0))
        found.extend(below)
        frontier.extend(below)
    return found


def worker_of_rank(launcher_pid, rank):
    """The pid of the launcher's worker with RANK=`rank`, or None."""
    for pid in children(launcher_pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    return pid
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return None


def cannot_run(reason):
    """Skips the test class or test for `reason`; under CI (CI set), where every dependency is
    installed, fails instead, so that a test never goes missing quietly."""
    if os.environ.get("CI"):
        raise AssertionError(f"cannot run under CI: {reason}")
    raise unittest.SkipTest(reason)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) counts as gone. The process may be reaped
    # between the open and the read, which then fails with ESRCH: gone as well.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_dead(pids, timeout):
    """True when none of `pids` is alive within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return not any(pid_alive(p) for p in pids)


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _end_what_the_test_started(signum, frame):
    """A test told to stop (SIGTERM from a runner or a person, SIGHUP from a closed terminal) first
    ends every process below it, by PID: each that it started runs in a session of its own, which
    no signal to the test's group reaches, and its finally blocks and cleanups do not run. Then it
    stops as the signal would have stopped it."""
    for _ in range(3):  # a process forked while the tree was walked is found on the next walk
        below = [pid for pid in descendants(os.getpid()) if pid_alive(pid)]
        if not below:
            break
        kill_all(below)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def end_what_the_test_started_on_stop():
    """Arms _end_what_the_test_started (from the main thread, where Python takes signals). Started
    calls it, rather than the import: worker scripts import this module and keep SIGTERM's
    default, which their launchers' tests count on."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) == signal.SIG_DFL:  # not a signal ignored (nohup) or taken
                signal.signal(signum, _end_what_the_test_started)


class Started:
    """A process started in its own session, whose whole group is killed on close(), and with the
    test's other processes if the test is told to stop."""

    def __init__(self, args, env=None, **kwargs):
        end_what_the_test_started_on_stop()
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True, **kwargs)
        self.extra_pids = []  # pids the test learnt from the output, killed on close as well

    def wait(self, timeout):
        """(returncode, stdout, stderr); kills everything and fails the test on timeout."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            self.close()
            raise AssertionError(f"timed out after {timeout} s: {self.proc.args}\nstdout:\n{out}\nstderr:\n{err}")
        return self.proc.returncode, out, err

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        kill_all(self.extra_pids)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream and not stream.closed:
                stream.close()


def run(args, timeout, env=None, **kwargs):
    """Runs to completion: (returncode, stdout, stderr), bounded by `timeout` seconds."""
    started = Started(args, env=env, **kwargs)
    try:
        return started.wait(timeout)
    finally:
        started.close()


def without_gloo_info(text):
    """`text` without the line newer Gloo prints on stderr for every connection it makes
    ("[./gloo/transport/tcp/context.cc:243] INFO Rank 0 is connected to 0. ..."), which says
    nothing of the run."""
    return "".join(line for line in text.splitlines(keepends=True) if not re.match(r"\[[^\]]*\] INFO ", line))


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_with(**overrides):
    env = dict(os.environ)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def leave_torch_world(dist):
    """Ends a Python PyTorch peer whose work is written: every rank waits for the others, then the
    process leaves without tearing the Gloo group down. Python torch over Gloo cannot be trusted
    to: dist.destroy_process_group() hung every rank in 3 to 5 runs of 12 (torch 2.6, Debian 13),
    and leaving it to the interpreter's exit aborted ("terminate called without an active
    exception", signal 6, a joinable thread destroyed) in about 1 run of 20, on 1.13 and 2.6. The
    barrier first, so that no rank leaves while another still waits on its part of a collective."""
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def pids_in(text):
    """The pids of "PID <n>" lines, which the test workers print first."""
    return [int(p) for p in re.findall(r"PID (\d+)", text)]


def wait_for_pids(started, count, timeout=30):
    """Reads `started`'s stdout until `count` PID lines have appeared; returns the pids, which
    close() then kills as well."""
    pids, deadline = [], time.monotonic() + timeout
    while len(pids) < count and time.monotonic() < deadline:
        line = started.proc.stdout.readline()
        if not line:
            break
        pids += pids_in(line)
    started.extra_pids += pids
    if len(pids) < count:
        raise AssertionError(f"saw {len(pids)} of {count} worker pids")
    return pids

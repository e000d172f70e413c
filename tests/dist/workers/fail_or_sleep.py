"""Rank FAIL_RANK prints a last word and exits with FAIL_CODE after a short delay; every other rank
prints its pid (and, with SPAWN_CHILD=1, the pid of a child it starts) and sleeps. With
IGNORE_TERM=1 the sleepers ignore SIGTERM and SIGINT, so only SIGKILL ends them."""
import os
import signal
import subprocess
import sys
import time

rank = int(os.environ["RANK"])
fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
print(f"PID {os.getpid()}", flush=True)
if os.environ.get("SPAWN_CHILD") == "1":
    child = subprocess.Popen(["sleep", "120"])
    print(f"PID {child.pid}", flush=True)
if rank == fail_rank:
    time.sleep(0.5)
    print("about to fail: the disk is full", flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
time.sleep(120)

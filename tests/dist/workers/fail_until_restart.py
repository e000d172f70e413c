"""Fails (exit 5) on every attempt before attempt SUCCEED_AT, then succeeds."""
import os
import sys

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"attempt {attempt} of rank {os.environ['RANK']}", flush=True)
sys.exit(0 if attempt >= int(os.environ["SUCCEED_AT"]) else 5)

"""Helpers for the tests that run `dptrain train` and `dptrain eval`."""

import json
import re

from proc import env_with, free_port


def alone():
    """The environment of a single-process run: its own rendezvous port, so tests running side by
    side do not collide on the default one."""
    return env_with(MASTER_PORT=free_port())


def last_json(out):
    """The JSON line rank 0 ends with (under `dptrain launch`, after its "[rank 0] " prefix)."""
    return json.loads(re.sub(r"^\[rank \d+\] ", "", out.strip().splitlines()[-1]))

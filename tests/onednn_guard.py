"""Imported for its effect: Python's torch runs without oneDNN where dptrain does (compat/onednn.h):
on a machine that hides its caches' topology, where LibTorch 2.x's oneDNN crashes or miscomputes
convolutions, so that a peer test compares the same arithmetic on both sides."""

import os

import torch

if not os.path.exists("/sys/devices/system/cpu/cpu0/cache/index0") and int(torch.__version__.split(".")[0]) >= 2:
    torch.backends.mkldnn.enabled = False

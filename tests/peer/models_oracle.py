"""Driving $DPT_BUILD/bin/dptrain_models_oracle (tests/peer/dptrain_models_oracle.cpp), which moves
models and state dicts between dptrain and torchvision, and building torchvision's models without
their weight fills: what test_models_structure and test_models_oracle share."""
import contextlib
import os
import subprocess

import torch

BUILD = os.environ.get("DPT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
ORACLE = os.path.join(BUILD, "bin", "dptrain_models_oracle")


def oracle(*args, timeout=300):
    if not os.path.exists(ORACLE):
        raise AssertionError(f"{ORACLE} is missing: build the target dptrain_models_oracle")
    return subprocess.run([ORACLE, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def checked(*args, timeout=300):
    result = oracle(*args, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"dptrain_models_oracle {args} failed ({result.returncode}): {result.stderr}")
    return result.stdout


# torch.nn.init's fills, which every torchvision constructor (and each layer's reset_parameters)
# reaches through the module at call time.
INITS = ["uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
         "xavier_normal_", "constant_", "zeros_", "ones_", "orthogonal_"]


@contextlib.contextmanager
def uninitialised():
    """Models built inside leave their weights as allocated: names, shapes and types are all the
    structure check reads (and a state dict loaded next replaces them), and filling RegNetY-128GF's
    or ConvNeXt-L's weights took 11-14 s."""
    saved = {name: getattr(torch.nn.init, name) for name in INITS}
    for name in INITS:
        setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, fill in saved.items():
            setattr(torch.nn.init, name, fill)

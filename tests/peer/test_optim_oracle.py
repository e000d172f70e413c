"""dptrain's optimizers against torch.optim, as torchvision's classification recipes build them:
the same parameter groups as torchvision's set_weight_decay (norm layers and biases), then five
steps from the same weights on the same gradients (those of Python's own training steps) with
SGD, SGD with Nesterov, RMSprop (eps 0.0316, alpha 0.9) and AdamW, gradient clipping included:
the weights after the steps agree within 1e-6 of their scale, and dptrain's optimizer state loads
into the torch.optim class with every buffer and step count equal to Python's.

Drives $DPT_BUILD/bin/dptrain_optim_oracle (tests/peer/dptrain_optim_oracle.cpp).
"""
import os
import subprocess
import tempfile
import unittest

import torch

from torchvision_zoo import NUM_CLASSES, torchvision_model

BUILD = os.environ.get("DPT_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
ORACLE = os.path.join(BUILD, "bin", "dptrain_optim_oracle")
STEPS, BATCH, SIDE = 5, 4, 32
NORM_LAYERS = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm,
               torch.nn.modules.instancenorm._InstanceNorm, torch.nn.LocalResponseNorm)

# (arch, flags): each optimizer on a convolutional network with batch norms, and AdamW, the
# transformers' optimizer, on a ViT with layer norms.
CASES = [
    ("resnet18", ["--opt", "sgd", "--lr", "0.05", "--momentum", "0.9", "--wd", "1e-4"]),
    ("resnet18", ["--opt", "sgd_nesterov", "--lr", "0.05", "--momentum", "0.9", "--wd", "1e-4",
                  "--norm-weight-decay", "0"]),
    ("resnet18", ["--opt", "rmsprop", "--lr", "0.01", "--momentum", "0.9", "--wd", "1e-5", "--norm-weight-decay", "0",
                  "--clip-grad-norm", "1"]),
    ("resnet18", ["--opt", "adamw", "--lr", "0.001", "--wd", "0.05", "--norm-weight-decay", "0",
                  "--bias-weight-decay", "0"]),
    ("vit_ti_16", ["--opt", "adamw", "--lr", "0.003", "--wd", "0.3", "--bias-weight-decay", "0.01",
                   "--clip-grad-norm", "0.5"]),
]


def flag(flags, name, default=None):
    return float(flags[flags.index(name) + 1]) if name in flags else default


def weight_decay_groups(model, flags):
    """torchvision's set_weight_decay (references/classification/utils.py), with the "bias"
    custom key: groups "other", "norm", "bias" in that order, empty ones dropped."""
    norm_wd, bias_wd = flag(flags, "--norm-weight-decay"), flag(flags, "--bias-weight-decay")
    groups = {"other": [], "norm": [], "bias": []}
    decay = {"other": flag(flags, "--wd", 1e-4), "norm": norm_wd, "bias": bias_wd}

    def add(module, prefix):
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if bias_wd is not None and name == "bias":
                key = "bias"
            elif norm_wd is not None and isinstance(module, NORM_LAYERS):
                key = "norm"
            else:
                key = "other"
            groups[key].append((f"{prefix}.{name}" if prefix else name, param))
        for child_name, child in module.named_children():
            add(child, f"{prefix}.{child_name}" if prefix else child_name)

    add(model, "")
    return [(decay[key], members) for key, members in groups.items() if members]


def python_optimizer(groups, flags):
    params = [{"params": [p for _, p in members], "weight_decay": wd} for wd, members in groups]
    opt, lr, momentum = flags[flags.index("--opt") + 1], flag(flags, "--lr"), flag(flags, "--momentum", 0.9)
    if opt.startswith("sgd"):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov="nesterov" in opt)
    if opt == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, momentum=momentum, eps=0.0316, alpha=0.9)
    return torch.optim.AdamW(params, lr=lr)


def scaled_difference(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1e-12)).item()


class Optimizers(unittest.TestCase):
    def test_steps_groups_and_state_match_torch_optim(self):
        for arch, flags in CASES:
            with self.subTest(arch=arch, flags=" ".join(flags)), tempfile.TemporaryDirectory(prefix="dpt_optim_") as tmp:
                torch.manual_seed(4)
                model = torchvision_model(arch, SIDE)
                for module in model.modules():  # dropout off, as the C++ side builds the model
                    if isinstance(module, torch.nn.Dropout):
                        module.p = 0.0
                torch.save(dict(model.state_dict()), os.path.join(tmp, "initial.pt"))
                groups = weight_decay_groups(model, flags)
                optimizer = python_optimizer(groups, flags)
                model.train()
                grads = {name: [] for name, _ in model.named_parameters()}
                for step in range(STEPS):
                    optimizer.zero_grad()
                    x, y = torch.randn(BATCH, 3, SIDE, SIDE), torch.randint(NUM_CLASSES, (BATCH,))
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    for name, param in model.named_parameters():
                        grads[name].append(param.grad.clone())
                    if "--clip-grad-norm" in flags:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), flag(flags, "--clip-grad-norm"))
                    optimizer.step()
                torch.save({name: torch.stack(steps) for name, steps in grads.items()}, os.path.join(tmp, "grads.pt"))
                result = subprocess.run([ORACLE, tmp, "--arch", arch, "--image-size", str(SIDE), *flags],
                                        capture_output=True, text=True, timeout=300)
                self.assertEqual(result.returncode, 0, result.stderr)

                expected_groups = [" ".join([f"{wd:g}"] + [name for name, _ in members]) for wd, members in groups]
                self.assertEqual(result.stdout.splitlines(), expected_groups)
                final = torch.load(os.path.join(tmp, "final.pt"))
                differences = {name: scaled_difference(final[name], value.detach())
                               for name, value in model.named_parameters()}
                print(arch, " ".join(flags), "worst scaled weight difference", max(differences.values()))
                for name, difference in differences.items():
                    self.assertLessEqual(difference, 1e-6, name)

                loaded = python_optimizer(weight_decay_groups(model, flags), flags)
                loaded.load_state_dict(torch.load(os.path.join(tmp, "optimizer.pt")))
                self.assertEqual(len(loaded.state), len(optimizer.state))
                for param, state in optimizer.state.items():
                    for key, value in state.items():
                        theirs = loaded.state[param][key]
                        if torch.is_tensor(value) and value.numel() > 1:
                            self.assertLessEqual(scaled_difference(theirs, value), 1e-6, key)
                        else:
                            self.assertEqual(float(theirs), float(value), key)
                for ours, theirs in zip(optimizer.param_groups, loaded.param_groups):
                    for key in ("lr", "weight_decay", "momentum", "nesterov", "alpha", "eps", "betas"):
                        if key in ours:
                            self.assertEqual(ours[key], theirs[key] if key != "betas" else tuple(theirs[key]), key)


if __name__ == "__main__":
    unittest.main()

"""The steps of GradScaler.HalfGradientsOverflowAndBackOffAsTorchAmp_CUDA
(tests/unit/train/grad_scaler_test.cpp) through torch.cuda.amp.GradScaler: PyTorch must give the
scales, skipped steps and weights that test asserts of dptrain's scaler. Run by scripts/gpu-check;
exits 1 naming the first difference, 2 without a GPU."""
import sys

import torch

EXPECTED_SCALE = [2**19, 2**18, 2**17, 2**16, 2**15, 2**15, 2**16, 2**15]
EXPECTED_STEP = [False, False, False, False, False, True, True, False]

if not torch.cuda.is_available():
    print("grad_scaler_sequence: no CUDA device")
    sys.exit(2)
linear = torch.nn.Linear(2, 3, bias=False).cuda()
with torch.no_grad():
    linear.weight.fill_(0.125)
sgd = torch.optim.SGD(linear.parameters(), lr=1.0)
# torch.amp.GradScaler("cuda") from 2.3 on; torch.cuda.amp's (deprecated there) before.
if hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**20, growth_interval=2)
else:
    scaler = torch.cuda.amp.GradScaler(init_scale=2.0**20, growth_interval=2)
x = torch.tensor([[0.5, 0.25], [0.5, 0.25]], device="cuda")
weight = 0.125
for i in range(8):
    sgd.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        y = linear(x)
    scaler.scale(y.float().sum()).backward()
    before = linear.weight.detach().clone()
    scaler.step(sgd)
    scaler.update()
    stepped = not torch.equal(before, linear.weight.detach())
    if EXPECTED_STEP[i]:
        weight -= 1.0
    column = linear.weight.detach()[:, 0].cpu()
    if (stepped, scaler.get_scale()) != (EXPECTED_STEP[i], EXPECTED_SCALE[i]) or \
            not torch.equal(column, torch.full((3,), weight)):
        print(f"grad_scaler_sequence: step {i}: torch stepped={stepped} scale={scaler.get_scale()} "
              f"column 0={column.tolist()}; dptrain's test expects stepped={EXPECTED_STEP[i]} "
              f"scale={EXPECTED_SCALE[i]} column 0={weight}")
        sys.exit(1)
print("grad_scaler_sequence: torch.cuda.amp.GradScaler gives the sequence dptrain's test asserts")

"""GhostNet in Python with the module layout of the GhostNet authors' reference model
(huawei-noah/Efficient-AI-Backbones, ghostnet_pytorch/ghostnet.py): the same module names and
registration order, so the same state dict, and the same forward. No Debian package ships that
model, so test_models_oracle checks dptrain's C++ GhostNet against this one."""

import math

import torch
from torch import nn


def divisible(value, divisor=4):
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def conv_bn(conv, channels, relu):
    return nn.Sequential(conv, nn.BatchNorm2d(channels), *([nn.ReLU(inplace=True)] if relu else []))


class GhostModule(nn.Module):
    def __init__(self, cin, cout, relu):
        super().__init__()
        self.cout = cout
        half = math.ceil(cout / 2)
        self.primary_conv = conv_bn(nn.Conv2d(cin, half, 1, bias=False), half, relu)
        self.cheap_operation = conv_bn(nn.Conv2d(half, half, 3, padding=1, groups=half, bias=False), half, relu)

    def forward(self, x):
        primary = self.primary_conv(x)
        return torch.cat([primary, self.cheap_operation(primary)], 1)[:, :self.cout]


class SqueezeExcite(nn.Module):
    def __init__(self, channels, ratio):
        super().__init__()
        reduced = divisible(channels * ratio)
        self.conv_reduce = nn.Conv2d(channels, reduced, 1)
        self.conv_expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        scale = self.conv_expand(torch.relu(self.conv_reduce(x.mean((2, 3), keepdim=True))))
        return x * (nn.functional.relu6(scale + 3) / 6)


class GhostBottleneck(nn.Module):
    def __init__(self, cin, mid, cout, kernel, se_ratio, stride):
        super().__init__()
        self.stride = stride
        self.ghost1 = GhostModule(cin, mid, True)
        if stride > 1:
            self.conv_dw = nn.Conv2d(mid, mid, kernel, stride, (kernel - 1) // 2, groups=mid, bias=False)
            self.bn_dw = nn.BatchNorm2d(mid)
        self.se = SqueezeExcite(mid, se_ratio) if se_ratio else None
        self.ghost2 = GhostModule(mid, cout, False)
        if cin == cout and stride == 1:
            self.shortcut = nn.Sequential()
        else:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cin, kernel, stride, (kernel - 1) // 2, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.ghost1(x)
        if self.stride > 1:
            y = self.bn_dw(self.conv_dw(y))
        if self.se is not None:
            y = self.se(y)
        return self.ghost2(y) + self.shortcut(x)


class ConvBnAct(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act1 = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act1(self.bn1(self.conv(x)))


# Per stage, per bottleneck: kernel, expansion, output channels, SE ratio, stride (the paper's table 1).
STAGES = [
    [(3, 16, 16, 0, 1)], [(3, 48, 24, 0, 2)], [(3, 72, 24, 0, 1)], [(5, 72, 40, 0.25, 2)], [(5, 120, 40, 0.25, 1)],
    [(3, 240, 80, 0, 2)],
    [(3, 200, 80, 0, 1), (3, 184, 80, 0, 1), (3, 184, 80, 0, 1), (3, 480, 112, 0.25, 1), (3, 672, 112, 0.25, 1)],
    [(5, 672, 160, 0.25, 2)],
    [(5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1), (5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1)],
]


class GhostNet(nn.Module):
    def __init__(self, num_classes=1000, width=1.0, dropout=0.2):
        super().__init__()
        channels = divisible(16 * width)
        self.conv_stem = nn.Conv2d(3, channels, 3, 2, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.act1 = nn.ReLU(inplace=True)
        stages = []
        for stage in STAGES:
            blocks = []
            for kernel, expansion, out, se_ratio, stride in stage:
                out = divisible(out * width)
                blocks.append(GhostBottleneck(channels, divisible(expansion * width), out, kernel, se_ratio, stride))
                channels = out
            stages.append(nn.Sequential(*blocks))
        last = divisible(STAGES[-1][-1][1] * width)
        stages.append(nn.Sequential(ConvBnAct(channels, last)))
        self.blocks = nn.Sequential(*stages)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.conv_head = nn.Conv2d(last, 1280, 1)
        self.act2 = nn.ReLU(inplace=True)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x):
        x = self.blocks(self.act1(self.bn1(self.conv_stem(x))))
        x = self.act2(self.conv_head(self.global_pool(x))).flatten(1)
        return self.classifier(self.dropout(x))


if __name__ == "__main__":
    print(sum(p.numel() for p in GhostNet().parameters()))

"""ResNet-50, defined here with torchvision's architecture (torchvision does not
install beside the CPU PyTorch wheel of this project's machines).

He, Zhang, Ren, Sun, "Deep Residual Learning for Image Recognition", CVPR 2016,
Table 1 (50-layer: bottleneck blocks [3, 4, 6, 3], widths 64-128-256-512, expansion 4),
in torchvision's variant "ResNet v1.5": the stride of a down-sampling bottleneck is on
its 3x3 convolution, not on the first 1x1 (torchvision ``models/resnet.py``).
Initialisation as torchvision: Kaiming-normal (fan_out, ReLU) convolutions,
BatchNorm weight 1 and bias 0.

With 10 classes and the ImageNet stem the model has exactly 23,528,522 parameters
(torchvision's resnet50 has 25,557,032 with 1000 classes; its fc layer accounts for
the difference: 2048 x 1000 + 1000 vs 2048 x 10 + 10).

Stems:
    ``imagenet``: 7x7/2 convolution and 3x3/2 max pool, as torchvision (a 32x32 CIFAR
        image is 1x1 after the last stage);
    ``cifar``: 3x3/1 convolution and no pool, common for 32x32 inputs (23,520,842
        parameters; about 16x the compute per image).

Input: float tensor [N, 3, H, W]; output: logits [N, num_classes].
"""

from __future__ import annotations

import torch
from torch import nn

STEMS = ("imagenet", "cifar")
RESNET50_LAYERS = (3, 4, 6, 3)


def conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class Bottleneck(nn.Module):
    """1x1 reduce -> 3x3 (stride here, v1.5) -> 1x1 expand (x4), plus the shortcut."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        out_ch = width * self.expansion
        self.conv1 = conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, out_ch)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Bottleneck ResNet; ``ResNet((3, 4, 6, 3))`` is ResNet-50."""

    def __init__(self, layers=RESNET50_LAYERS, num_classes: int = 10, stem: str = "imagenet"):
        super().__init__()
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
        self.stem_kind = stem
        self.in_ch = 64
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool: nn.Module = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.conv1 = conv3x3(3, 64)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, width: int, blocks: int, stride: int = 1) -> nn.Sequential:
        out_ch = width * Bottleneck.expansion
        downsample = None
        if stride != 1 or self.in_ch != out_ch:
            downsample = nn.Sequential(conv1x1(self.in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))
        layers = [Bottleneck(self.in_ch, width, stride, downsample)]
        self.in_ch = out_ch
        layers += [Bottleneck(out_ch, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 10, stem: str = "imagenet") -> ResNet:
    """ResNet-50 (bottleneck [3, 4, 6, 3]); 23,528,522 parameters for 10 classes, ImageNet stem."""
    return ResNet(RESNET50_LAYERS, num_classes=num_classes, stem=stem)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (BatchNorm running statistics excluded)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

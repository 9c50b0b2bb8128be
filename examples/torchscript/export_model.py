#!/usr/bin/env python3
"""Exports a small CNN for 28x28 grey images (Fashion-MNIST) as TorchScript.

    python3 export_model.py small_cnn.pt        # then: dlion run --config job.yaml

DLion trains any module saved this way (torch.jit.script, or torch.jit.trace
for a module without data-dependent control flow) that maps a float batch
(N, C, H, W) to logits (N, classes). Its parameters and floating-point
buffers (BatchNorm statistics) are trained; the module's code is kept as is.
"""
import argparse

import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self, channels: int = 1, classes: int = 10, size: int = 28):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Linear(16 * (size // 4) * (size // 4), classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the .pt file to write")
    parser.add_argument("--channels", type=int, default=1, help="input channels (1 for Fashion-MNIST)")
    parser.add_argument("--size", type=int, default=28, help="input height and width")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.jit.script(SmallCnn(args.channels, 10, args.size)).save(args.output)


if __name__ == "__main__":
    main()

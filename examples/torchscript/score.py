#!/usr/bin/env python3
"""Scores a model `dlion export` wrote on the Fashion-MNIST test set.

    python3 score.py model.pt --samples 10000

Prints {"accuracy": A, "samples": N} as JSON. DLion feeds its models pixels
normalised as (byte / 255 - 0.2860) / 0.3530 (Fashion-MNIST's mean and
standard deviation); so does this script. The run's accuracy is measured on
the first eval_samples test images, so --samples eval_samples scores the
same images.
"""
import argparse
import gzip
import json

import numpy as np
import torch

MEAN, STD = 0.2860, 0.3530


def idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="TorchScript file (dlion export, or a TorchScript model of a run)")
    parser.add_argument("--samples", type=int, default=10000, help="how many test images, from the first")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="folder of the t10k-*.gz files")
    args = parser.parse_args()
    images = idx(f"{args.data}/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[: args.samples]
    labels = torch.from_numpy(idx(f"{args.data}/t10k-labels-idx1-ubyte.gz", 8)[: args.samples].astype(np.int64))
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - MEAN) / STD
    model = torch.jit.load(args.model)
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1000]).argmax(1) == labels[i:i + 1000]).sum()) for i in range(0, len(x), 1000))
    print(json.dumps({"accuracy": correct / len(x), "samples": len(x)}))


if __name__ == "__main__":
    main()

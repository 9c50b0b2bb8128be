"""The PyTorch reference: LeNet-5 on Fashion-MNIST, same model, optimizer and
batch as the engine; single process or DDP over Gloo. Prints samples/s as
JSON. Run with Debian's /usr/bin/python3 (python3-torch)."""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def load():
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def train(model, x, y, steps, batch, seed):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    warm = 20
    for step in range(steps + warm):
        if step == warm:
            start = time.perf_counter()
        idx = order[(step * batch) % (len(x) - batch):][:batch]
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    return time.perf_counter() - start


def ddp_rank(rank, world, port, steps, batch, out):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load()
    x, y = x[rank::world], y[rank::world]
    torch.manual_seed(1)
    model = nn.parallel.DistributedDataParallel(LeNet5())
    seconds = train(model, x, y, steps, batch, rank)
    out[rank] = steps * batch / seconds
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--port", type=int, default=29533)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.workers == 1:
        x, y = load()
        torch.manual_seed(1)
        seconds = train(LeNet5(), x, y, a.steps, a.batch, 0)
        rate = a.steps * a.batch / seconds
    else:
        out = mp.Manager().dict()
        mp.spawn(ddp_rank, args=(a.workers, a.port, a.steps, a.batch, out), nprocs=a.workers)
        rate = sum(out.values())
    print(json.dumps({"system": "pytorch" if a.workers == 1 else "pytorch-ddp", "workers": a.workers,
                      "samples_per_s": rate}))


if __name__ == "__main__":
    main()

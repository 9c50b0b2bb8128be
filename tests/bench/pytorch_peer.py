"""The PyTorch reference: LeNet-5 on Fashion-MNIST, same model, optimizer and
batch as the engine; single process or DDP over Gloo. Prints samples/s
(and with --target the training time to that test accuracy) as JSON. Run
with Debian's /usr/bin/python3 (python3-torch)."""
import argparse
import ctypes
import gzip
import json
import os
import resource
import time

# One BLAS thread per process, as the engine's workers run OpenBLAS; read
# when numpy or torch first loads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# The agent's allocator thresholds (agent/allocator_thresholds.h), set before torch
# allocates anything. glibc's default moves its mmap threshold with the
# blocks freed, and where it settles is a toss-up: the same 1,500 steps ran
# at 2,800-6,100 samples/s with 0.6-1.3 million page faults, or at
# 11,500-14,500 without them. A fixed threshold compares the training
# loops, not that heuristic.
_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
_LIBC.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def idx(name, offset, shape):
    with gzip.open(os.path.join(DATA, name)) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset).reshape(shape)


def load(split="train"):
    x = idx(f"{split}-images-idx3-ubyte.gz", 16, (-1, 1, 28, 28))
    y = idx(f"{split}-labels-idx1-ubyte.gz", 8, (-1,))
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


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 250]).argmax(1) == y[i:i + 250]).sum()) for i in range(0, len(x), 250))
    model.train()
    return correct / len(x)


def train(model, x, y, a, seed, rank=0):
    """Samples/s over a.steps steps after 20 warm-up steps. With --target,
    rank 0 scores its replica every a.eval_steps steps on the first
    a.eval_samples test images, off the clock, and the run ends at the
    target; every step counts then, as in the engine's time to accuracy.
    Returns (seconds, steps, time to target or None, page faults a step)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    test = load("t10k") if a.target else None
    warm = 0 if a.target else 20
    clock, reached, step = 0.0, None, 0
    for step in range(1, a.steps + warm + 1):
        if step == warm + 1:
            start = time.perf_counter()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        i = ((step - 1) * a.batch) % (len(x) - a.batch)
        batch = order[i:i + a.batch]
        opt.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
        if a.target and step > warm and (step - warm) % a.eval_steps == 0:
            clock += time.perf_counter() - start
            done = torch.zeros(1)
            if rank == 0 and accuracy(model, test[0][:a.eval_samples], test[1][:a.eval_samples]) >= a.target:
                reached, done[0] = clock, 1
            if dist.is_initialized():
                dist.broadcast(done, 0)
            start = time.perf_counter()
            if done[0]:
                return clock, step - warm, reached, faults_per_step(faults, step - warm)
    return clock + time.perf_counter() - start, step - warm, reached, faults_per_step(faults, step - warm)


def faults_per_step(start, steps):
    """Minor page faults a step since `start`: an allocator that unmaps and
    faults in a step's blocks shows here first."""
    return round((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / max(steps, 1), 1)


def ddp_rank(rank, a, out):
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.workers)
    x, y = load()
    x, y = x[rank::a.workers], y[rank::a.workers]
    torch.manual_seed(a.seed)
    model = nn.parallel.DistributedDataParallel(LeNet5())
    out[rank] = train(model, x, y, a, a.seed * 7919 + rank, rank)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--port", type=int, default=29533)
    p.add_argument("--seed", type=int, default=1, help="model initialisation and data order")
    p.add_argument("--target", type=float, default=0, help="test accuracy that ends the run (0: none)")
    p.add_argument("--eval-steps", type=int, default=64)
    p.add_argument("--eval-samples", type=int, default=2000)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if a.workers == 1:
        x, y = load()
        torch.manual_seed(a.seed)
        results = {0: train(LeNet5(), x, y, a, a.seed * 7919)}
    else:
        results = mp.Manager().dict()
        mp.spawn(ddp_rank, args=(a, results), nprocs=a.workers)
    rate = sum(steps * a.batch / seconds for seconds, steps, _, _ in results.values())
    print(json.dumps({"system": "pytorch" if a.workers == 1 else "pytorch-ddp", "workers": a.workers,
                      "threads": a.threads, "samples_per_s": rate, "time_to_target": results[0][2],
                      "faults_per_step": results[0][3]}))


if __name__ == "__main__":
    main()

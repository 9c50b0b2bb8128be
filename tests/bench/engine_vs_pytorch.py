#!/usr/bin/env python3
"""Issue-3 benchmark: engine throughput vs PyTorch, measured in the same run.

1. One worker, LeNet-5, batch 32, 1 intra-op thread, Fashion-MNIST:
   `dlion run --workers 1` vs a PyTorch loop of the same model/optimizer.
2. Two local workers, strategy allreduce: vs PyTorch DDP (gloo), same settings.
Prints one JSON object: results (one entry per system), ratios, peak RSS per
agent. Not a timed test: it reports, it does not assert.
Usage: tests/bench/engine_vs_pytorch.py [--steps N] [--repeat R]"""
import argparse
import json
import socket
import subprocess
import sys

from bench_common import peak_rss_mb, run_dlion, training_rate

PEER = __file__.replace("engine_vs_pytorch.py", "pytorch_peer.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pytorch(workers, steps):
    out = subprocess.run(["/usr/bin/python3", PEER, "--workers", str(workers), "--steps", str(steps),
                          "--port", str(free_port())], capture_output=True, text=True, timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def engine(workers, steps):
    s = run_dlion(["--workers", str(workers), "--strategy", "allreduce", "--model", "lenet5",
                   "--batch-size", "32", "--threads", "1", "--max-rounds", str(steps + 20),
                   "--eval-interval", "86400", "--eval-samples", "1000"], timeout=900)
    return training_rate(s), peak_rss_mb(s)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--repeat", type=int, default=2, help="alternating repetitions; the best of each is kept")
    a = p.parse_args()
    best = {}
    rss = {}
    for _ in range(a.repeat):
        for workers in (1, 2):
            rate, mem = engine(workers, a.steps)
            best[("dlion", workers)] = max(best.get(("dlion", workers), 0), rate)
            rss[workers] = mem
            best[("pytorch", workers)] = max(best.get(("pytorch", workers), 0), pytorch(workers, a.steps))
    results = [{"system": f"{sys_}-{'single' if w == 1 else 'allreduce'}", "strategy": "allreduce", "workers": w,
                "samples_per_s": round(r, 1)} for (sys_, w), r in sorted(best.items())]
    print(json.dumps({
        "benchmark": "engine_vs_pytorch",
        "results": results,
        "ratio_single": round(best[("dlion", 1)] / best[("pytorch", 1)], 3),
        "ratio_2workers_vs_ddp": round(best[("dlion", 2)] / best[("pytorch", 2)], 3),
        "targets": {"ratio_single": 1.0, "ratio_2workers_vs_ddp": 1.0},
        "peak_rss_mb_per_agent": {str(k): v for k, v in rss.items()},
    }, indent=2))


if __name__ == "__main__":
    sys.exit(main())

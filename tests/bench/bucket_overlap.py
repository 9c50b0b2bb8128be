#!/usr/bin/env python3
"""What overlapping all-reduce buckets with backward gains, measured in one run.

Two local workers, strategy allreduce, the same job twice, interleaved:
`bucket_mb=0` (one all-reduce after backward) and the default buckets (DDP's
rule: 25 MB, the first at most 1 MB, started while backward runs). The
default job is the CNN on the procedural 32x32 `shapes` set over the `wan`
preset, whose 3.3 MB gradient splits into two buckets; LeNet-5 fits one
bucket and shows the cost of the machinery where it cannot help.
Prints one JSON object: samples/s, and per round the median compute and
exchange seconds (exchange: what backward did not hide), for each setting,
and the ratio of the medians. Not a timed test: it reports, it does not
assert.
Usage: tests/bench/bucket_overlap.py [--model cnn|lenet5] [--links PRESET] [--rounds N] [--repeat R]"""
import argparse
import json
import statistics

from bench_common import run_dlion, training_rate

DATASET = {"cnn": "shapes", "lenet5": "fashion-mnist"}


def run(model, links, rounds, bucket_mb):
    s = run_dlion(["--workers", "2", "--strategy", "allreduce", "--model", model, "--dataset", DATASET[model],
                   "--links", links, "--batch-size", "32", "--max-rounds", str(rounds), "--eval-interval", "86400",
                   "--eval-samples", "500", "--option", f"bucket_mb={bucket_mb}"], timeout=1800)
    # The first rounds warm the allocator and the links' estimates up.
    kept = [r for worker in s["rounds"] for r in worker[5:]]
    return {"samples_per_s": round(training_rate(s), 2),
            "compute_s": round(statistics.median(r["compute_s"] for r in kept), 4),
            "exchange_s": round(statistics.median(r["comm_s"] for r in kept), 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(DATASET), default="cnn")
    ap.add_argument("--links", default="wan")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    settings = {"after_backward": 0, "buckets": 25}
    runs = {name: [] for name in settings}
    for _ in range(a.repeat):
        for name, mb in settings.items():
            runs[name].append(run(a.model, a.links, a.rounds, mb))
    rate = {name: statistics.median(r["samples_per_s"] for r in rs) for name, rs in runs.items()}
    print(json.dumps({"model": a.model, "links": a.links, "rounds": a.rounds, "runs": runs,
                      "throughput_ratio": round(rate["buckets"] / rate["after_backward"], 3)}))


if __name__ == "__main__":
    main()

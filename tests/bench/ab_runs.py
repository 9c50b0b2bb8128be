#!/usr/bin/env python3
"""An A/B of agent builds or strategy knobs on one footing, the arms
alternating seed by seed.

On a shared 2-core host one strategy's time to a target moves by a factor
of two from run to run (docs/benchmarks.md), and the host's speed drifts
within a session, so two builds or two settings are compared only in runs
interleaved on the same host, over several seeds, each arm's figures
listed whole. An arm is NAME[=SPEC], SPEC a comma-separated list of
agent=PATH (a dlion-agent binary, as DLION_AGENT; default: the build's)
and strategy knobs KEY=VALUE (as --option); no SPEC is the default.

Footings: main (paper_table.py's: 4 workers, slowdown 1/1/2/4, wan-hetero
links, evaluation on 1000 test images every 2 s) or straggler (2 workers,
one 4x slower, no caps, evaluation every 0.5 s).

Prints one JSON object (every run's figures, each arm's medians) followed
by a markdown table.
Usage: tests/bench/ab_runs.py --arm NAME[=SPEC] --arm NAME[=SPEC] [...]
           [--strategy S] [--partition P] [--seconds S] [--seeds 101,102,...]
           [--footing main|straggler]"""
import argparse
import json
import os
import sys

from paper_table import CLUSTER, COMMON, DEFAULT_MOMENTUM, MOMENTUM, STRAGGLER, TARGETS, config, median_range, run_rows


def parse_arm(text):
    name, _, spec = text.partition("=")
    if not name:
        raise SystemExit(f"--arm {text!r}: expected NAME[=SPEC]")
    agent, knobs = None, []
    for item in filter(None, spec.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--arm {text!r}: {item!r} is not KEY=VALUE")
        if key == "agent":
            if not os.access(value, os.X_OK):
                raise SystemExit(f"--arm {text!r}: no dlion-agent binary at {value}")
            agent = value
        else:
            knobs.append(item)
    return {"name": name, "agent": agent, "knobs": knobs}


def summary_row(arm):
    runs = arm["runs"]

    def times(key):
        return sorted((r["time_to_accuracy"][key] for r in runs), key=lambda t: float("inf") if t is None else t)

    return {"samples_per_s": median_range([r["samples_per_s"] for r in runs]),
            "final_accuracy": median_range([r["final_accuracy"] for r in runs]),
            "time_to_accuracy": {k: times(k) for k in TARGETS},
            "reached": {k: sum(r["time_to_accuracy"][k] is not None for r in runs) for k in TARGETS},
            "merges": [r["merges"] for r in runs]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", action="append", required=True, help="NAME[=SPEC] (repeat for each arm)")
    p.add_argument("--strategy", default="dlion")
    p.add_argument("--partition", default="iid")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--seeds", default="101,102,103,104,105,106")
    p.add_argument("--footing", choices=("main", "straggler"), default="main")
    a = p.parse_args()
    arms = [parse_arm(t) for t in a.arm]
    if len({arm["name"] for arm in arms}) != len(arms):
        raise SystemExit("--arm: every arm needs a name of its own")
    seeds = [int(s) for s in a.seeds.split(",")]
    footing = (CLUSTER + ["--eval-samples", "1000"]) if a.footing == "main" else STRAGGLER
    configs = [config(arm["name"], a.strategy, a.partition, a.seconds,
                      footing + [x for k in arm["knobs"] for x in ("--option", k)],
                      env={"DLION_AGENT": arm["agent"]} if arm["agent"] else None) for arm in arms]
    for arm, row in zip(arms, run_rows(configs, seeds, rotate=True)):
        arm["runs"] = row["runs"]
        arm["summary"] = summary_row(arm)
    print(json.dumps({"benchmark": "ab_runs", "strategy": a.strategy, "partition": a.partition,
                      "budget_s": a.seconds, "seeds": seeds, "footing": a.footing,
                      "common": " ".join(COMMON + footing),
                      "momentum": MOMENTUM.get(a.strategy, DEFAULT_MOMENTUM), "arms": arms}, indent=2))

    def sorted_times(times):
        shown = [f"{t:.1f}" for t in times if t is not None]
        missed = len(times) - len(shown)
        return ", ".join(shown + ([f"not in {a.seconds:g} s ({missed})"] if missed else []))

    print()
    print(f"Seeds {a.seeds}, the arms alternating; times sorted.")
    print()
    print("| arm | samples/s (median) | 80% after (s) | 85% after (s) | final (median, min–max) | merges a run |")
    print("|---|---|---|---|---|---|")
    for arm in arms:
        s = arm["summary"]
        final, lowest, highest = s["final_accuracy"]
        print(f"| {arm['name']} | {s['samples_per_s'][0]:.0f} | {sorted_times(s['time_to_accuracy']['0.80'])} | "
              f"{sorted_times(s['time_to_accuracy']['0.85'])} | {100 * final:.2f}% "
              f"({100 * lowest:.2f}–{100 * highest:.2f}) | "
              f"{', '.join(map(str, s['merges']))} |")


if __name__ == "__main__":
    sys.exit(main())

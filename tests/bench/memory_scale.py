#!/usr/bin/env python3
"""Issue-14 benchmark: agent memory at 1, 2 and 16 local workers.

Runs `dlion run --workers N --model lenet5 --dataset fashion-mnist` and
samples every agent's /proc/PID/smaps_rollup while it runs: Rss counts the
shared libraries' pages in every agent, Anonymous only the memory no file
backs (heap, stacks, written pages of libraries), Pss divides shared pages between
the processes that map them (so the agents' Pss adds up to what they cost
together). Also an idle agent (LibTorch loaded, no job): the floor.
Evaluations are kept small (1000 samples every 10 s): 16 replicas scoring
the default 10000 every 2 s left a 2-core machine little else to do. Prints
one JSON object. Memory, not speed: it may run on a loaded machine.
Usage: tests/bench/memory_scale.py [--workers 1,2,16] [--seconds 60] [--strategy allreduce]"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_common import ROOT, dlion_binary, peak_rss_mb


def agent_binary():
    return os.environ.get("DLION_AGENT", os.path.join(ROOT, "build", "bin", "dlion-agent"))


def rollup_kb(pid):
    """{'Rss': kB, 'Pss': kB, ...} of one process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    return {k.rstrip(":"): int(v) for k, v, *_ in (line.split() for line in lines)}


def agents_of(pid):
    """The dlion-agent processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        if name == "dlion-agent" and int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(entry))
    return out


def idle_agent():
    """Rss and Pss (MB) of an agent that has loaded its libraries and waits."""
    env = dict(os.environ, DLION_SECRET="x" * 40)
    p = subprocess.Popen([agent_binary(), "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        p.stdout.readline()  # "dlion-agent listening on ..."
        m = rollup_kb(p.pid)
        return {key.lower() + "_mb": round(m[key] / 1024, 1) for key in ("Rss", "Anonymous", "Pss")}
    finally:
        p.terminate()
        p.wait()


def run(workers, seconds, strategy, timeout):
    with tempfile.TemporaryDirectory(prefix="dlion-mem-") as out:
        env = dict(os.environ, DLION_STORE=os.path.join(out, "store.sqlite"))
        args = [dlion_binary(), "run", "--workers", str(workers), "--strategy", strategy, "--model", "lenet5",
                "--dataset", "fashion-mnist", "--seconds", str(seconds), "--seed", "7", "--eval-samples", "1000",
                "--eval-interval", "10", "--out", out, "--quiet"]
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        peak_rss, peak_anon, peak_pss, peak_total_pss = {}, {}, {}, 0
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            total = 0
            for pid in agents_of(proc.pid):
                m = rollup_kb(pid)
                if m:
                    peak_rss[pid] = max(peak_rss.get(pid, 0), m["Rss"])
                    peak_anon[pid] = max(peak_anon.get(pid, 0), m["Anonymous"])
                    peak_pss[pid] = max(peak_pss.get(pid, 0), m["Pss"])
                    total += m["Pss"]
            peak_total_pss = max(peak_total_pss, total)
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        err = proc.communicate()[1]
        path = os.path.join(out, "summary.json")
        summary = json.load(open(path)) if os.path.exists(path) else None
        done = proc.returncode == 0 and summary is not None and summary["status"] == "finished"
        result = {"workers": workers, "strategy": strategy, "seconds": seconds, "completed": done,
                  "sampled_peak_rss_mb": sorted(round(v / 1024, 1) for v in peak_rss.values()),
                  "sampled_peak_anon_mb": sorted(round(v / 1024, 1) for v in peak_anon.values()),
                  "sampled_peak_pss_mb": sorted(round(v / 1024, 1) for v in peak_pss.values()),
                  "peak_total_pss_mb": round(peak_total_pss / 1024, 1)}
        if summary:
            result.update({"peak_rss_mb": peak_rss_mb(summary),
                           "rounds": [w["rounds"] for w in summary["per_worker"]],
                           "final_accuracy": summary["final_accuracy"]})
        if not done:
            result["error"] = err.strip()[-500:]
        return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", default="1,2,16", help="comma-separated worker counts")
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--strategy", default="allreduce")
    a = p.parse_args()
    results = [run(int(n), a.seconds, a.strategy, timeout=a.seconds * 10 + 300) for n in a.workers.split(",")]
    print(json.dumps({
        "benchmark": "memory_scale",
        "idle_agent": idle_agent(),
        "results": results,
        "targets": {"peak_rss_mb_per_agent": 200},
    }, indent=2))
    return 0 if all(r["completed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

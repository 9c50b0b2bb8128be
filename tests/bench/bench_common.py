"""Helpers shared by the benchmarks: run `dlion run`, read its summary."""
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dlion_binary():
    path = os.environ.get("DLION_CLI", os.path.join(ROOT, "build", "bin", "dlion"))
    if not os.access(path, os.X_OK):
        raise SystemExit(f"dlion not found at {path}: build first (installer/build.sh) or set DLION_CLI")
    return path


def run_dlion(args, timeout, env=None):
    """Runs `dlion run ARGS --quiet` in a fresh run directory; returns the
    summary. `env`: variables to set for it (e.g. DLION_AGENT)."""
    with tempfile.TemporaryDirectory(prefix="dlion-bench-") as out:
        variables = {**os.environ, **(env or {}), "DLION_STORE": os.path.join(out, "store.sqlite")}
        proc = subprocess.run([dlion_binary(), "run", *args, "--out", out, "--quiet"], env=variables,
                              capture_output=True, text=True, timeout=timeout)
        path = os.path.join(out, "summary.json")
        if proc.returncode != 0 or not os.path.exists(path):
            raise RuntimeError(f"dlion run {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        with open(path) as f:
            return json.load(f)


def training_rate(summary):
    """Samples/s over the training rounds only (evaluations excluded)."""
    total, seconds = 0, 0.0
    for rounds in summary["rounds"]:
        if rounds:
            total += sum(r["batch"] for r in rounds)
            seconds = max(seconds, rounds[-1]["t"])
    return total / seconds if seconds > 0 else 0.0


def peak_rss_mb(summary):
    return [round(w["outcome"].get("peak_rss_kb", 0) / 1024, 1) for w in summary["per_worker"]]

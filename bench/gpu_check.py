"""Check: what the agent's NVML collector reads against `nvidia-smi --query-gpu` in the same second, field
by field with the difference. On a machine without a GPU (no NVML, no driver, no device) it says so in one
line and exits 0.

Run: .venv/bin/python bench/gpu_check.py [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time

from causewatch import wire
from causewatch.agent.node.nvml import Nvml

# nvidia-smi's query field -> the collector's (None: a label, compared as text)
QUERY = {"index": None, "uuid": None, "utilization.gpu": "DCGM_FI_DEV_GPU_UTIL",
         "memory.used": "DCGM_FI_DEV_FB_USED", "memory.total": "DCGM_FI_DEV_FB_TOTAL",
         "power.draw": "DCGM_FI_DEV_POWER_USAGE", "clocks.sm": "DCGM_FI_DEV_SM_CLOCK",
         "clocks.mem": "DCGM_FI_DEV_MEM_CLOCK", "temperature.gpu": "DCGM_FI_DEV_GPU_TEMP"}
COMMAND = ["nvidia-smi", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"]


def parse_smi(text: str) -> dict[str, dict[str, str]]:
    """{gpu index: {query field: its text}} of nvidia-smi's CSV lines."""
    out = {}
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY):
            raise ValueError(f"nvidia-smi line {line!r}: {len(cells)} fields, expected {len(QUERY)}")
        row = dict(zip(QUERY, cells))
        out[row["index"]] = row
    return out


def by_gpu(values: dict[str, float]) -> dict[str, dict[str, float | str]]:
    """{gpu index: {field: value, "uuid": UUID}} of the collector's labelled series."""
    out: dict[str, dict] = {}
    for metric, value in values.items():
        base, labels = wire.unlabelled(metric)
        if base.startswith("DCGM_FI_") and "gpu" in labels:
            out.setdefault(labels["gpu"], {"uuid": labels["UUID"]})[base] = value
    return out


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:   # [N/A], [Not Supported]
        return None


def compare(agent: dict[str, dict], smi: dict[str, dict[str, str]]) -> list[dict]:
    """One row per (gpu, field): the agent's value, nvidia-smi's and agent − nvidia-smi (None where either
    lacks it); the UUID compared as text."""
    rows = []
    for gpu in sorted(set(agent) | set(smi), key=int):
        ours, theirs = agent.get(gpu, {}), smi.get(gpu, {})
        rows.append({"gpu": gpu, "field": "uuid", "agent": ours.get("uuid"), "nvidia_smi": theirs.get("uuid"),
                     "difference": None if ours.get("uuid") == theirs.get("uuid") else "differs"})
        for query, metric in ((q, m) for q, m in QUERY.items() if m):
            a, s = ours.get(metric), _number(theirs.get(query, ""))
            rows.append({"gpu": gpu, "field": query, "metric": metric, "agent": a, "nvidia_smi": s,
                         "difference": None if a is None or s is None else round(a - s, 3)})
    return rows


def round_once(collector: Nvml) -> dict:
    """nvidia-smi started, the collector read while it runs, both within one second (`seconds_apart`)."""
    t0 = time.time()
    smi = subprocess.Popen(COMMAND, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    values = collector.collect()
    t1 = time.time()
    out, err = smi.communicate(timeout=30)
    t2 = time.time()
    if smi.returncode != 0:
        raise SystemExit(f"gpu_check: {' '.join(COMMAND)} failed ({smi.returncode}): {err.strip()}")
    return {"at": t0, "seconds_apart": round(t2 - t0, 3), "agent_seconds": round(t1 - t0, 4),
            "fields": compare(by_gpu(values), parse_smi(out)),
            "failing": {f"{gpu}.{field}": reason for (gpu, field), reason in collector.failing.items()}}


def _show(value) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="examples:\n  bench/gpu_check.py\n  bench/gpu_check.py --rounds 3 --json",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=1, help="readings side by side, a second apart (default 1)")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: give at least 1")
    collector = Nvml()
    reason = collector.open()
    if reason is None and shutil.which("nvidia-smi") is None:
        collector.close()
        reason = "nvidia-smi not found on PATH"
    if reason is not None:
        print(json.dumps({"skipped": reason}) if args.json else f"gpu_check: skipped, no GPU to check here ({reason})")
        return 0
    try:
        rounds = []
        for i in range(args.rounds):
            if i:
                time.sleep(1.0)
            rounds.append(round_once(collector))
    finally:
        collector.close()
    if args.json:
        print(json.dumps({"rounds": rounds}, indent=1))
        return 0
    for r in rounds:
        print(f"read {r['seconds_apart']} s apart (the agent's collect: {r['agent_seconds']} s)")
        print(f"{'gpu':>3} {'field':<16} {'agent':>14} {'nvidia-smi':>14} {'difference':>11}")
        for row in r["fields"]:
            print(f"{row['gpu']:>3} {row['field']:<16} {_show(row['agent']):>14.14} {_show(row['nvidia_smi']):>14.14} "
                  f"{_show(row['difference']):>11}")
        for field, why in r["failing"].items():
            print(f"  not read: {field}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`causewatch job ID`: a Slurm job's efficiency report on each node it ran on: CPU use against its
allocation (CPU-seconds / (CPUs x elapsed)), memory high-water against its request, I/O, pressure stalls,
its perf counters, its phase mix (from its IP samples), its steps, and the dependency anomalies open while
it ran.

Reads a running daemon's HTTP API (--daemon) or a stopped daemon's store (--db).
"""

from __future__ import annotations

import json

from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs

EPILOG = """examples:
  causewatch job 4242
  causewatch job 4242 --node n17 --json
  causewatch job 4242 --db causewatch.duckdb
"""


def add_arguments(parser) -> None:
    parser.add_argument("id", help="the Slurm job id")
    parser.add_argument("--node", action="append", help="only its part on this node (repeatable)")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _share(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _number(x, unit: str = "", scale: float = 1.0) -> str:
    return "-" if x is None else f"{x / scale:.2f}{unit}"


def _shown(top: list[dict]) -> list[dict]:
    """A phase's top functions worth a line: the first, and the others that round to more than 0.0 %."""
    return top[:1] + [t for t in top[1:] if t["share"] >= 0.0005]


def lines(r: dict) -> list[str]:
    """One node's part of a job as the report's lines."""
    alloc = (f"{_number(r['cpus'], ' CPUs')}, {_number(r['memory_bytes'], ' MiB', 2**20)}"
             + (f", {r['gpus']} GPUs" if r.get("gpus") else ""))
    out = [f"job {r['job_id']} on {r['node']}: {r['job_name'] or '-'} of {r['user'] or '-'} "
           f"({r['state']}, {r['elapsed_seconds']:.0f} s; counted from {r['counted_from'] or 'nothing yet'})",
           f"  allocation     {alloc}",
           f"  cpu            {_number(r['cpu_seconds'], ' s')} used, {_share(r['cpu_efficiency'])} of the allocation"
           f" (user {_number(r['cpu_user_seconds'], ' s')}, system {_number(r['cpu_system_seconds'], ' s')})",
           f"  memory peak    {_number(r['memory_peak_bytes'], ' MiB', 2**20)}, {_share(r['memory_efficiency'])} "
           f"of the request",
           f"  io             read {_number(r['io_read_bytes'], ' MiB', 2**20)}, "
           f"written {_number(r['io_written_bytes'], ' MiB', 2**20)}"]
    for name, p in r["pressure"].items():
        out.append(f"  pressure       {name.replace('_', ' ')}: {_number(p['seconds'], ' s')} ({_share(p['share'])})")
    for name, c in r.get("counters", {}).items():
        out.append(f"  perf           {name.replace('_', ' ')}: {c['count']:.6g} (counted {_share(c['running_ratio'])} "
                   "of the time)")
    out += [f"  phase {p['phase']:<8} {_share(p['weight'])} of the samples ({p['intervals']} vectors): "
            + ", ".join(f"{t['key']} {_share(t['share'])}" for t in _shown(p["top"])) for p in r.get("phases", [])]
    missing = {part: why for part, why in r["counted"].items() if why != "ok"}
    out += [f"  not counted    {part}: {why}" for part, why in missing.items()]
    out += [f"  step {s['step']:<9} {s['state']:<9} {s['elapsed_seconds']:.0f} s, cpu {_number(s['cpu_seconds'], ' s')}"
            for s in r["steps"]]
    out += [f"  anomaly        {a['scope']}: {a['kind']} {a['src']} -> {a['dst']} (score {a['score']:.3f})"
            for a in r["anomalies"]]
    return out


def run(args) -> int:
    with open_source(args) as source:
        found = source.read(verbs.JOB, id=args.id, node=args.node)
    if args.json:
        print(json.dumps(found, indent=2, default=str))
        return 0
    print("\n".join(line for r in found for line in lines(r)))
    return 0

"""How bench/anomaly_live.py scores one run on the anomalies the daemon raised (as /api/anomalies
gives them: `opened`, `resolved` in epoch seconds, `evidence.causes` ranked best first), and the table
of runs that met the goal, scenario by load.

A run whose app had no baseline model by the change judged nothing and does not meet it. A quiet run
(calm, mix shift) meets it with no anomaly at all. A fault's run meets it when no anomaly
opened before the fault, exactly one from its start to the run's end (more is a burst), that one within
LATENCY s of the start, its first cause (score at least 1, the daemon's own cut) one of the fault's
culprits, and resolved by RESOLVE s after the fault's end (resolved after the run's end counts as never).
"""

from __future__ import annotations

from dataclasses import dataclass

QUIET = ("calm", "mix")
FAULTS = ("hog", "service", "io", "membw", "neighbour")
SCENARIOS = QUIET + FAULTS
CHANGED = {"calm": "nothing", "mix": "bigger inputs, another mix of kinds", "hog": "busy loops for 60 s",
           "service": "+30 ms a service call for 60 s", "io": "an fsync'd writer on the same disk for 60 s",
           "membw": "a process streaming a 256 MiB array for 60 s",
           "neighbour": "a process there from the start turns busy for 60 s"}
LATENCY = 60.0       # seconds from the fault's start the anomaly must open within
RESOLVE = 90.0       # seconds from the fault's end it must resolve within
CUT = 1.0            # a cause scored below this is "none beyond the cut" (daemon/culprits.py)


@dataclass(frozen=True)
class Plan:
    """One run's stretches in epoch seconds: the change at `start` (a fault, the mix's shift; for calm
    the half time), the fault's `end` (None without one), the run's `run_end`, and the units that count
    as the fault's culprit ranked first."""
    scenario: str
    start: float
    end: float | None
    run_end: float
    culprits: tuple[str, ...] = ()


def first_cause(a: dict) -> tuple[str | None, float | None]:
    causes = (a.get("evidence") or {}).get("causes") or []
    return (causes[0]["unit"], causes[0]["score"]) if causes else (None, None)


def score(plan: Plan, anomalies: list[dict], baseline: float | None) -> dict:
    """One run's figures and whether it met the goal (`passed`, with `why` not). `baseline`: when the
    app's baseline model was first seen (epoch seconds; None: never); a run without one by the change
    judged nothing, and fails whatever it raised."""
    seen = sorted((a for a in anomalies if a["opened"] <= plan.run_end), key=lambda a: a["opened"])
    out = {"scenario": plan.scenario, "opened": len(seen), "said": [said(a, plan) for a in seen]}
    unarmed = "no baseline model by the change" if baseline is None or baseline > plan.start else ""
    if plan.scenario in QUIET:
        why = [w for w in (unarmed, seen and f"{len(seen)} anomalies on a quiet run") if w]
        return dict(out, passed=not why, why="; ".join(why))
    before = [a for a in seen if a["opened"] < plan.start]
    after = [a for a in seen if a["opened"] >= plan.start]
    out.update(before=len(before), after=len(after), burst=len(after) > 1, latency_s=None, cause=None,
               cause_score=None, named=False, resolved_after_end_s=None)
    if after:
        first = after[0]
        unit, value = first_cause(first)
        resolved = first["resolved"] if first["resolved"] is not None and first["resolved"] <= plan.run_end else None
        out.update(latency_s=round(first["opened"] - plan.start, 1), cause=unit, cause_score=value,
                   named=unit in plan.culprits and value >= CUT,
                   resolved_after_end_s=None if resolved is None else round(resolved - plan.end, 1))
    latency, resolved = out["latency_s"], out["resolved_after_end_s"]
    why = [w for w, bad in (
        (unarmed, unarmed),
        (f"{len(before)} opened before the fault", before),
        ("none opened after its start", not after),
        (f"a burst of {len(after)}", len(after) > 1),
        (f"the first {latency} s after its start", latency is not None and latency > LATENCY),
        (f"its first cause {out['cause']!r}, not the culprit", after and not out["named"]),
        ("never resolved", after and resolved is None),
        (f"resolved {resolved} s after its end", resolved is not None and resolved > RESOLVE),
    ) if bad]
    return dict(out, passed=not why, why="; ".join(why))


def said(a: dict, plan: Plan) -> str:
    """One anomaly in a line: kind, variables, opening from the change (and the task rows it was raised on,
    which under a lagging analysis may all precede it), resolution, first cause."""
    unit, value = first_cause(a)
    resolved, since = a["resolved"], "the fault's end" if plan.end else "the change"
    gone = "never resolved" if resolved is None or resolved > plan.run_end else \
        f"resolved {resolved - (plan.end or plan.start):+.0f} s from {since}"
    cause = "not ranked" if unit is None else f"{unit} ({value:.2f})"
    rows = (a.get("evidence") or {}).get("raised_on")   # an edge's: the raising version's window
    on = "" if not rows else \
        f" on rows {rows['first_start'] - plan.start:+.0f}..{rows['last_start'] - plan.start:+.0f} s"
    return f"{a['kind']} {a['src']}->{a['dst']} {a['opened'] - plan.start:+.0f} s{on}, {gone}; first cause {cause}"


def table(runs: list[dict], loads: list[int], scenarios: list[str]) -> str:
    """The markdown table of runs that met the goal, scenario by load (`runs`: score's, with `load`)."""
    head = "| scenario | what changed halfway | " + " | ".join(f"{n} busy loops" for n in loads) + " |"
    lines = [head, "|" + "---|" * (2 + len(loads))]
    for s in scenarios:
        cells = []
        for n in loads:
            mine = [r for r in runs if r["scenario"] == s and r["load"] == n]
            cells.append(f"{sum(r['passed'] for r in mine)}/{len(mine)}" if mine else "-")
        lines.append(f"| {s} | {CHANGED[s]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

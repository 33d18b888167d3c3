"""The report's sections that other parts compute, each read through the API: the workload's phases,
the probe ranking and what the brokers would be told of it, the model pictures, and where the causal
learns ran (the counters /metrics shows)."""

from __future__ import annotations

from pathlib import Path

from causewatch.commands.demo.causes import rounded
from causewatch.commands.demo.parts import APP, SCOPE, SEED
from causewatch.commands.diff import learnt
from causewatch.commands.diff_store import task_windows
from causewatch.daemon import verbs
from causewatch.errors import InputError, NotFoundError


def phases(api, shown: int = 8) -> list[dict]:
    """The workload's phases, as `causewatch phases --target app:demo --kind python` finds them in its
    tasks' Python-frame vectors: the heaviest `shown`, each with its top functions."""
    from causewatch.analytics.phases import phase_mix
    rows = phase_mix(api.read(verbs.BBV, target=SCOPE, kind="python"), top=2, seed=SEED)
    out = [{"phase": r["phase"], "weight": round(r["weight"], 3), "intervals": r["intervals"],
            "top_functions": ", ".join(f"{t['key']} {t['share']:.0%}" for t in r["top"][:1] + [
                t for t in r["top"][1:] if t["share"] >= 0.005])}   # not "0%"
           for r in rows[:shown]]
    if len(rows) > shown:
        out.append({"more": f"{len(rows) - shown} lighter phases: causewatch phases --db … --target {SCOPE} "
                            "--kind python"})
    return out


def ranking(api) -> list[dict]:
    """/api/rank's nodes for the demo app, fastest first ([] before any probe came back)."""
    try:
        return api.read(verbs.RANK, app=APP)["nodes"]
    except NotFoundError:
        return []


def probe_ranking(ranked: list[dict]) -> list[dict]:
    """Each ranked node's predicted seconds per task, its interval and ratio, the probe's age and the kit's quality."""
    return [{"node": r["node"], "s_per_task": rounded(r["task_seconds"]), "lo": rounded(r["task_lo"]),
             "hi": rounded(r["task_hi"]), "ratio": round(r["ratio"], 3), "age_s": round(r["age_seconds"]),
             "phases": len(r["phases"]), "cpu_bound_phases": sum(bool(p.get("stretched")) for p in r["phases"]),
             "kit": r["quality"]} for r in ranked]


def brokers(app: str, ranked: list[dict]) -> dict:
    """What each scheduler would be told from the ranking, as a dry run (docs/brokers.md): the Slurm
    updates of `causewatch broker slurm --dry-run`, each node's HTCondor slot attributes, the extender's scores."""
    from causewatch.probe import broker
    plan = broker.slurm_plan(app, ranked, None, {})
    return {"slurm": [" ".join(c) for c in broker.slurm_updates(app, plan, None)],
            "htcondor": {r["node"]: broker.condor_attributes(app, r) for r in ranked},
            "kubernetes": broker.extender_scores(ranked, sorted(r["node"] for r in ranked))}


def pictures(api, folder: Path) -> list[dict]:
    """The newest model of each scope drawn by the daemon (/api/model?format=svg, open anomalies in red),
    saved in the demo folder."""
    drawn = []
    for scope in sorted({m["scope"] for m in api.read(verbs.MODELS)}):
        path = folder / f"model-{scope.replace(':', '-')}.svg"
        path.write_text(str(api.read(verbs.MODEL, scope=scope, format="svg")))
        drawn.append({"scope": scope, "svg": str(path)})
    return drawn


def model_diff(api, base: dict | None, span: tuple[float, float] | None, origin: float, folder: Path) -> list[dict]:
    """What changed in the model from the baseline's tasks to the hog's (`causewatch diff`'s store form
    through the API, its picture saved in the demo folder): a row a change, or one saying why none."""
    if base is None or span is None:
        return []
    ranges = (base["window_start"], base["window_end"]), (origin + span[0], origin + span[1])
    try:
        found = learnt(*task_windows(api, SCOPE, ranges)[:3])
    except InputError as e:
        return [{"change": "not judged", "why": str(e)}]
    from causewatch.analytics.causal import diff_svg
    path = folder / "model-diff.svg"
    path.write_text(diff_svg(found, title=f"{SCOPE}: the baseline's tasks -> the hog's"))
    rows = [_edge_row(c) for c in found.edges] + [_mechanism_row(m) for m in found.mechanisms]
    return rows or [{"change": "none beyond the bands", "rows": f"{found.rows[0]} -> {found.rows[1]}"}]


def _edge_row(c) -> dict:
    bits = " -> ".join("-" if e is None else f"{e.strength:.2f}" for e in (c.before, c.after))
    return {"change": c.kind, "edge": f"{c.src} -> {c.dst}", "bits": bits}


def _mechanism_row(m) -> dict:
    return {"change": "mechanism", "variable": m.variable, "given": ",".join(m.given),
            "typical": f"{m.before} -> {m.after}", "fit": f"{m.formula_before} -> {m.formula_after}"}


def analysis(counters: dict[tuple, float], runs_on: str) -> list[dict]:
    """Where the causal learns ran and how many, from the counters the causal job published
    (`counters`: (family, label values...) -> value, as session.metrics reads /metrics)."""
    from causewatch.daemon import compute
    return [{"runs_on": runs_on or "local",
             "learns_local": int(counters.get((compute.TASKS, "local"), 0)),
             "learns_cluster": int(counters.get((compute.TASKS, "cluster"), 0)),
             "fallbacks": int(sum(v for (name, *_), v in counters.items() if name == compute.FALLBACKS)),
             "retries": int(sum(v for (name, *_), v in counters.items() if name == compute.RETRIED))}]

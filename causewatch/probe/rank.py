"""Rank nodes for an application by the task time their latest probe predicts, with the probe's age
and its kit's quality. Pure: takes the daemon's `readers.probes.latest_probes` rows and registered kits.
"""

from __future__ import annotations

from causewatch.probe.quality import format_quality

RATIO = ("this node's time over the kit's reference node's for the same tasks (P = sum of w_i t_i(node) / "
         "t_i(reference)): 2.0 is twice as slow as the reference, 0.5 twice as fast")


def rank_nodes(app: str, latest: list[dict], kits: list[dict], now: float) -> list[dict]:
    """`latest` (one row per node: node, kit, ts, predicted_seconds, lo, hi, ratio, probe_seconds, phases;
    busy and other_cpu where recorded) ranked by predicted seconds per task, fastest first, numbered from 1.

    A result's predicted_seconds is the task-seconds of one whole run of the kit's workload (the sum of
    its `tasks` task times); per task is that over `tasks`, the mean task's time, with the same interval.
    `kits` ({app, kit, manifest}, the registered ones) give the task count, reference node and quality."""
    manifests = {k["kit"]: k["manifest"] or {} for k in kits if k["app"] == app}
    rows = []
    for r in latest:
        manifest = manifests.get(r["kit"])
        tasks = (manifest or {}).get("tasks")
        task = {f"task_{k}": r[v] / tasks if tasks else None
                for k, v in (("seconds", "predicted_seconds"), ("lo", "lo"), ("hi", "hi"))}
        rows.append({
            "node": r["node"], "app": app, "kit": r["kit"], **task,
            "run_task_seconds": r["predicted_seconds"], "run_lo": r["lo"], "run_hi": r["hi"], "tasks_per_run": tasks,
            "ratio": r["ratio"], "reference_node": (manifest or {}).get("reference", {}).get("node"),
            "probed_at": r["ts"], "age_seconds": max(0.0, now - r["ts"]), "probe_seconds": r["probe_seconds"],
            "quality": format_quality(manifest) if manifest is not None else "kit no longer registered",
            # others' share of the node's CPU while the probe ran: a busy node's probe reads it slower
            "busy": r.get("busy"), "other_cpu": r.get("other_cpu"), "phases": r["phases"]})
    # Per task, so results of kits with different task counts compare; a kit no longer registered last.
    rows.sort(key=lambda r: (r["task_seconds"] is None, r["task_seconds"] or r["run_task_seconds"], r["node"]))
    return [{"rank": i, **r} for i, r in enumerate(rows, 1)]


def age(seconds: float) -> str:
    """A duration as people say it: '12 s', '3.5 min', '2.0 h', '1.2 d'."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{max(0.0, seconds):.0f} s"


def failed_line(failed: dict, now: float) -> str:
    """A failed probe ({node, kit, ts, reason}) in a sentence: which node, when, and why."""
    return (f"the probe of kit {failed['kit']} failed on {failed['node']} {age(now - failed['ts'])} ago: "
            f"{failed['reason']}")

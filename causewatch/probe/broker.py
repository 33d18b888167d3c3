"""What a grid broker is told from a ranking: HTCondor slot attributes, Kubernetes extender scores, Slurm
node weights and a per-application best-node feature. Pure: takes /api/rank's rows (`rank.rank_nodes`).

Unknown stays unknown: a node without a fresh result gets no attribute (HTCondor reads an undefined
`Rank` as 0.0), the lowest extender score, and a Slurm weight after every ranked node.
"""

from __future__ import annotations

import re

MAX_AGE = 2 * 86400.0      # a result older than this is stale: twice the daemon's default reprobe_after
MAX_SCORE = 10             # Kubernetes' MaxExtenderPriority


def attr_app(app: str) -> str:
    """`app` as it may stand inside a ClassAd attribute or a Slurm feature name: [A-Za-z0-9_]."""
    return re.sub(r"\W", "_", app, flags=re.ASCII)


def is_fresh(row: dict, max_age: float) -> bool:
    return row.get("task_seconds") is not None and row.get("age_seconds", float("inf")) <= max_age


# ---- HTCondor: startd cron output --------------------------------------------------------------

def condor_attributes(app: str, row: dict | None) -> dict[str, float | int]:
    """The machine attributes of one node's ranking row; each absent when unknown, never 0. Staleness is
    left to the job (`time() - causewatch_<app>_probe_time`), which sees the age grow between runs."""
    if row is None or row.get("task_seconds") is None or row["task_seconds"] <= 0:
        return {}
    name = f"causewatch_{attr_app(app)}"
    out = {f"{name}_seconds": row["task_seconds"]}
    if row.get("task_hi") is not None:
        out[f"{name}_seconds_hi"] = row["task_hi"]
    out[f"{name}_tasks_per_hour"] = 3600.0 / row["task_seconds"]    # higher is better, for Rank
    if row.get("probed_at") is not None:
        out[f"{name}_probe_time"] = int(row["probed_at"])
    return out


def condor_cron_output(attributes: dict[str, float | int], slots: list[int]) -> str:
    """Startd cron output: one ad per slot (`SlotId` picks the slot it merges into), each ended by a
    `- cw_slot<N>` line naming it, so the next run's ad replaces it (an attribute gone stays gone)."""
    lines = []
    for slot in slots:
        lines += [f"{k} = {_classad_number(v)}" for k, v in sorted(attributes.items())]
        lines += [f"SlotId = {slot}", f"- cw_slot{slot}"]
    return "\n".join(lines) + "\n"


def _classad_number(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6g}" if abs(value) >= 1e-4 else repr(float(value))


# ---- Kubernetes: scheduler extender prioritize ------------------------------------------------

def extender_scores(rows: list[dict], hosts: list[str], max_age: float = MAX_AGE) -> list[dict]:
    """HostPriorityList for `hosts`: a fresh node scores 10 times the best node's task time over its own
    (at least 1: probed beats unknown); a node unprobed, stale or not ranked scores 0."""
    fresh = {r["node"]: r["task_seconds"] for r in rows if is_fresh(r, max_age) and r["task_seconds"] > 0}
    best = min((fresh[h] for h in hosts if h in fresh), default=None)
    return [{"Host": h, "Score": max(1, round(MAX_SCORE * best / fresh[h])) if h in fresh else 0} for h in hosts]


# ---- Slurm: weights and the best-node feature -------------------------------------------------

def best_feature(app: str) -> str:
    return f"cw_{attr_app(app)}_best"


def slurm_plan(app: str, rows: list[dict], slurm_nodes: list[str] | None, node_map: dict[str, str],
               max_age: float = MAX_AGE, best: int = 1) -> list[dict]:
    """One row per Slurm node: its weight (the fresh ranked nodes 1, 2, … in rank order; stale and
    unprobed ones all after them) and whether it carries `best_feature(app)` (the `best` first).

    `node_map` maps causewatch node names to Slurm's (a name not in it is the same in both);
    `slurm_nodes` are the controller's nodes (None: unknown, then the ranked nodes are planned alone)."""
    by_slurm: dict[str, dict] = {}
    for r in rows:
        by_slurm.setdefault(node_map.get(r["node"], r["node"]), r)
    names = list(slurm_nodes) if slurm_nodes is not None else list(by_slurm)
    ranked = sorted((n for n in names if n in by_slurm and is_fresh(by_slurm[n], max_age)),
                    key=lambda n: by_slurm[n]["rank"])
    after = len(ranked) + 1
    plan = []
    for name in names:
        row = by_slurm.get(name)
        state = "ranked" if name in ranked else "stale" if row is not None else "unprobed"
        position = ranked.index(name) + 1 if state == "ranked" else None
        plan.append({"slurm_node": name, "node": row["node"] if row else None, "state": state,
                     "rank": row["rank"] if row else None, "task_seconds": row.get("task_seconds") if row else None,
                     "age_seconds": row.get("age_seconds") if row else None,
                     "weight": position or after, "best": position is not None and position <= best})
    plan.sort(key=lambda p: (p["weight"], p["slurm_node"]))
    return plan


def slurm_updates(app: str, plan: list[dict], current: dict[str, dict] | None) -> list[list[str]]:
    """The `scontrol update` argument lists that bring each planned node to its weight and feature.
    `current` (node -> {weight, available, active}, as `scontrol show node` says) leaves out what is
    already so and keeps the node's other features; None (Slurm not asked): every node, ours alone."""
    feature = best_feature(app)
    out = []
    for p in plan:
        now = (current or {}).get(p["slurm_node"])
        args = []
        if now is None or now.get("weight") != p["weight"]:
            args.append(f"Weight={p['weight']}")
        available, active = (list(now["available"]), list(now["active"])) if now else ([], [])
        want_available = [f for f in available if f != feature] + ([feature] if p["best"] else [])
        want_active = [f for f in active if f != feature] + ([feature] if p["best"] else [])
        if now is None and p["best"] or now is not None and (want_available != available or want_active != active):
            args += [f"AvailableFeatures={','.join(want_available)}", f"ActiveFeatures={','.join(want_active)}"]
        if args:
            out.append(["scontrol", "update", f"NodeName={p['slurm_node']}", *args])
    return out


def parse_scontrol_nodes(text: str) -> dict[str, dict]:
    """`scontrol show node --oneliner` output -> node -> {weight, available, active, state}."""
    nodes = {}
    for line in text.splitlines():
        fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))
        if "NodeName" not in fields:
            continue
        features = lambda key: [f for f in fields.get(key, "").split(",") if f and f != "(null)"]  # noqa: E731
        nodes[fields["NodeName"]] = {"weight": int(fields["Weight"]) if fields.get("Weight", "").isdigit() else None,
                                     "available": features("AvailableFeatures"), "active": features("ActiveFeatures"),
                                     "state": fields.get("State", "")}
    return nodes

"""Software probes as stored: the registered kits and each node's newest results (with the facts
they were taken under, and the task time they predict); a failed probe's row has its `error` and no
prediction, and a result's `extra` says whether the node was busy while it ran."""

from __future__ import annotations

import json

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared


def registered_kits(con: Cursor) -> list[dict]:
    """Every registered kit as {app, kit, path, manifest}."""
    rows = con.execute("SELECT app, kit, path, manifest FROM probe_kits ORDER BY app, kit").fetchall()
    return [{"app": a, "kit": k, "path": p, "manifest": json.loads(m) if m else None} for a, k, p, m in rows]


def newest_probes(con: Cursor, nodes: list[str] | None = None) -> dict[tuple[str, str, str], dict]:
    """(node, app, kit) -> {ts, facts, error} of the newest result of each kit on each node (or on
    `nodes`), failed or not; facts is None for a result stored before they were recorded."""
    where, params = ("WHERE list_contains(?, node)", [nodes]) if nodes is not None else ("", [])
    rows = con.execute(f"SELECT node, app, kit, max(ts), arg_max(facts, ts), arg_max(error, ts) FROM probe_results "
                       f"{where} GROUP BY ALL", params).fetchall()
    return {(n, a, k): {"ts": ts, "facts": json.loads(f) if f else None, "error": e} for n, a, k, ts, f, e in rows}


def probed_apps(con: Cursor) -> list[str]:
    """The apps that have probe results (predictions, not failures), sorted."""
    return [r[0] for r in con.execute("SELECT DISTINCT app FROM probe_results WHERE error IS NULL "
                                      "ORDER BY app").fetchall()]


# The node's load during a probe, from a result's extra (NULL for results stored before it was recorded).
LOAD = ("CAST(extra->>'busy' AS BOOLEAN) AS busy, CAST(extra->>'other_cpu' AS DOUBLE) AS other_cpu, "
        "CAST(extra->>'idle_waited' AS DOUBLE) AS idle_waited")


def latest_probes(con: Cursor, app: str) -> list[dict]:
    """Each node's newest probe result (prediction) for `app`, fastest predicted first, with the node's
    load while it ran (busy, other_cpu, idle_waited)."""
    rows = shared.records(con.execute(f"""
        SELECT node, kit, ts, predicted_seconds, lo, hi, ratio, probe_seconds, phases, {LOAD} FROM (
            SELECT *, row_number() OVER (PARTITION BY node ORDER BY ts DESC, seq DESC) AS newest
            FROM probe_results WHERE app = ? AND error IS NULL)
        WHERE newest = 1 ORDER BY predicted_seconds, node""", [app]))
    for row in rows:
        row["phases"] = json.loads(row["phases"]) if row["phases"] else []
    return rows


def failed_probes(con: Cursor, app: str) -> list[dict]:
    """The nodes whose newest probe of `app` failed: node, kit, ts, reason; by node."""
    return shared.records(con.execute("""
        SELECT node, kit, ts, error AS reason FROM (
            SELECT *, row_number() OVER (PARTITION BY node ORDER BY ts DESC, seq DESC) AS newest
            FROM probe_results WHERE app = ?)
        WHERE newest = 1 AND error IS NOT NULL ORDER BY node""", [app]))


def probe_states(con: Cursor, app: str | None = None) -> list[dict]:
    """Each (node, app, kit)'s probe: `done` or `failed` by its newest result (when: ts; why: reason;
    the node's load), or `pending` for a registered kit a node heard from has no result for (ts: when
    the kit was registered); with the node's last_seen. By node, app, kit."""
    return shared.records(con.execute(f"""
        WITH newest AS (
            SELECT *, row_number() OVER (PARTITION BY node, app, kit ORDER BY ts DESC, seq DESC) AS k
            FROM probe_results WHERE ? IS NULL OR app = ?),
        states AS (
            SELECT node, app, kit, CASE WHEN error IS NULL THEN 'done' ELSE 'failed' END AS state, ts,
                   error AS reason, predicted_seconds, probe_seconds, {LOAD}
            FROM newest WHERE k = 1
            UNION ALL BY NAME
            SELECT n.node, r.app, r.kit, 'pending' AS state, r.registered AS ts
            FROM nodes n CROSS JOIN probe_kits r
            WHERE (? IS NULL OR r.app = ?) AND NOT EXISTS (
                SELECT 1 FROM probe_results p WHERE p.node = n.node AND p.app = r.app AND p.kit = r.kit))
        SELECT s.*, n.last_seen FROM states s LEFT JOIN nodes n USING (node)
        ORDER BY s.node, s.app, s.kit""", [app, app, app, app]))


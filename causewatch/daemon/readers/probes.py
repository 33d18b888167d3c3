"""Software probes as stored: the registered kits and each node's newest results (with the facts
they were taken under, and the task time they predict)."""

from __future__ import annotations

import json

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared


def registered_kits(con: Cursor) -> list[dict]:
    """Every registered kit as {app, kit, path, manifest}."""
    rows = con.execute("SELECT app, kit, path, manifest FROM probe_kits ORDER BY app, kit").fetchall()
    return [{"app": a, "kit": k, "path": p, "manifest": json.loads(m) if m else None} for a, k, p, m in rows]


def newest_probes(con: Cursor, nodes: list[str] | None = None) -> dict[tuple[str, str, str], dict]:
    """(node, app, kit) -> {ts, facts} of the newest result of each kit on each node (or on `nodes`);
    facts is None for a result stored before they were recorded."""
    where, params = ("WHERE list_contains(?, node)", [nodes]) if nodes is not None else ("", [])
    rows = con.execute(f"SELECT node, app, kit, max(ts), arg_max(facts, ts) FROM probe_results {where} "
                       "GROUP BY ALL", params).fetchall()
    return {(n, a, k): {"ts": ts, "facts": json.loads(f) if f else None} for n, a, k, ts, f in rows}


def probed_apps(con: Cursor) -> list[str]:
    """The apps that have probe results, sorted."""
    return [r[0] for r in con.execute("SELECT DISTINCT app FROM probe_results ORDER BY app").fetchall()]


def latest_probes(con: Cursor, app: str) -> list[dict]:
    """Each node's newest probe result for `app`, fastest predicted first."""
    rows = shared.records(con.execute("""
        SELECT node, kit, ts, predicted_seconds, lo, hi, ratio, probe_seconds, phases FROM (
            SELECT *, row_number() OVER (PARTITION BY node ORDER BY ts DESC, seq DESC) AS newest
            FROM probe_results WHERE app = ?)
        WHERE newest = 1 ORDER BY predicted_seconds, node""", [app]))
    for row in rows:
        row["phases"] = json.loads(row["phases"]) if row["phases"] else []
    return rows

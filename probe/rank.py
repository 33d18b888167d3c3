"""Rank nodes for an application by the task time their latest probe predicts.

Serves `causewatch rank`, GET /api/rank?app=... (via `api_rank`) and the predicted-time gauge.
"""

from __future__ import annotations

import json

from causewatch.errors import InputError

_LATEST = """
    SELECT node, kit, ts, predicted_seconds, lo, hi, ratio, probe_seconds, phases FROM (
        SELECT *, row_number() OVER (PARTITION BY node ORDER BY ts DESC, seq DESC) AS newest
        FROM probe_results WHERE app = ?)
    WHERE newest = 1 ORDER BY predicted_seconds, node
"""


def rank_nodes(con, app: str) -> list[dict]:
    """Nodes for `app`, fastest predicted first: rank, node, kit, predicted_seconds, lo, hi, ratio, ..."""
    rows = con.execute(_LATEST, [app]).fetchall()
    out = []
    for i, (node, kit, ts, pred, lo, hi, ratio, probe_s, phases) in enumerate(rows, 1):
        out.append({"rank": i, "node": node, "app": app, "kit": kit, "ts": ts, "predicted_seconds": pred,
                    "lo": lo, "hi": hi, "ratio": ratio, "probe_seconds": probe_s,
                    "phases": json.loads(phases) if phases else []})
    return out


def predicted_times(con) -> list[tuple[str, str, float]]:
    """(app, node, predicted seconds) of every node's latest probe of every app."""
    return con.execute("""
        SELECT app, node, arg_max(predicted_seconds, ts) FROM probe_results GROUP BY app, node ORDER BY app, node
    """).fetchall()


def api_rank(params: dict, con) -> dict:
    """GET /api/rank?app=APP -> {"app": APP, "nodes": [...]} (register as an HttpApi route)."""
    app = params.get("app")
    if not app:
        raise InputError("GET /api/rank needs ?app=NAME")
    return {"app": app, "nodes": rank_nodes(con, app)}

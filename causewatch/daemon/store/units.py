"""The `units` rows of the agents' `unit` records, on the writer thread: a row per (node, unit, start),
each record folded into it (a field a record leaves out keeps what the row had; an end, once there, stays),
so records may arrive in any order and a resent one changes nothing.
"""

from __future__ import annotations

import json
import time

import duckdb

from causewatch import wire

# the units table's columns, in its order, and the record field each is read from
COLUMNS = ("node", "unit", "started", "kind", "ended", "parent", "job_id", "step", "uid", "user", "job_name", "cpus",
           "cpuset", "memory_bytes", "gpus", "cgroup", "source", "counted", "totals", "extra", "updated")
_FIELD = {"started": "start", "ended": "end"}
_JSON = ("counted", "totals", "extra")
KEY = ("node", "unit", "started")
# one statement may not update a row twice: `unit_rows` folds a batch's records of one unit first
UPSERT = "ON CONFLICT (node, unit, started) DO UPDATE SET " + ", ".join(
    f"{c} = coalesce(excluded.{c}, units.{c})" if c != "ended" else "ended = coalesce(units.ended, excluded.ended)"
    for c in COLUMNS if c not in KEY)


def _row(f: wire.Frame, now: float) -> dict:
    body = f.body
    row = {c: body.get(_FIELD.get(c, c)) for c in COLUMNS}
    row.update(node=f.node, updated=now)
    return row


def unit_rows(frames: list[wire.Frame], now: float | None = None) -> list[tuple]:
    """The rows of a batch's unit records, one per (node, unit, start): later records' fields over earlier
    ones' (an end stays once given); JSON columns as text."""
    now = time.time() if now is None else now
    folded: dict[tuple, dict] = {}
    for f in frames:
        row = _row(f, now)
        key = tuple(row[k] for k in KEY)
        old = folded.get(key)
        if old is not None:
            row = {c: old[c] if row[c] is None or (c == "ended" and old[c] is not None) else row[c] for c in COLUMNS}
        folded[key] = row
    return [tuple(json.dumps(r[c], separators=(",", ":")) if c in _JSON and r[c] is not None else r[c]
                  for c in COLUMNS) for r in folded.values()]


def running_units(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """The units not ended, with what their series are labelled by (the exporter's state at a start)."""
    cur = con.execute("SELECT node, unit, kind, job_id, user, started AS start, cpus, memory_bytes, gpus FROM units "
                      "WHERE ended IS NULL")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]

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


def sampled(con: duckdb.DuckDBPyConnection, scopes, metrics=None) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(node, unit) -> {metric: [newest value, highest value]} of the samples of these units (scopes), of
    `metrics` (None: all), in one query."""
    scopes = sorted(set(scopes))
    if not scopes:
        return {}
    where, params = f"scope IN ({', '.join('?' * len(scopes))})", list(scopes)
    if metrics is not None:
        where += f" AND metric IN ({', '.join('?' * len(metrics))})"
        params += list(metrics)
    out: dict[tuple[str, str], dict[str, list[float]]] = {}
    for node, scope, metric, value, high in con.execute(
            f"SELECT node, scope, metric, arg_max(value, ts), max(value) FROM samples WHERE {where} GROUP BY ALL",
            params).fetchall():
        out.setdefault((node, scope), {})[metric] = [value, high]
    return out


def merged(kept: dict[str, list[float]], now: dict[str, list[float]]) -> dict[str, list[float]]:
    """A summary kept earlier and the samples there now as one: the newest values are those there now
    (the kept ones' samples are older: retention deleted them), the highest the higher of both."""
    out = dict(kept)
    for metric, (value, high) in now.items():
        old = kept.get(metric)
        out[metric] = [value, high if old is None or old[1] is None else max(high, old[1])]
    return out


def summaries(con: duckdb.DuckDBPyConnection, scopes) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(node, unit) -> the summary kept of these units' deleted samples."""
    scopes = sorted(set(scopes))
    if not scopes:
        return {}
    cur = con.execute(f"SELECT node, unit, figures FROM unit_summaries WHERE unit IN ({', '.join('?' * len(scopes))})",
                      scopes)
    return {(node, unit): json.loads(figures) for node, unit, figures in cur.fetchall()}


def keep_summaries(con: duckdb.DuckDBPyConnection, cutoff: float, now: float | None = None) -> int:
    """Before retention deletes the samples older than `cutoff`: every unit with some of them gets its
    summary (`sampled` of all its samples, merged into the one kept before). Returns the units summed up."""
    doomed = con.execute("SELECT DISTINCT scope FROM samples WHERE ts < ? AND scope IN (SELECT unit FROM units)",
                         [cutoff]).fetchall()
    scopes = [s for (s,) in doomed]
    now_sampled, kept = sampled(con, scopes), summaries(con, scopes)
    rows = [(node, unit, json.dumps(merged(kept.get((node, unit), {}), figures), separators=(",", ":")),
             time.time() if now is None else now) for (node, unit), figures in now_sampled.items()]
    if rows:
        con.executemany("INSERT INTO unit_summaries VALUES (?, ?, ?, ?) ON CONFLICT (node, unit) DO UPDATE SET "
                        "figures = excluded.figures, kept = excluded.kept", rows)
    return len(rows)


def drop_summaries(con: duckdb.DuckDBPyConnection) -> int:
    """The summaries of units whose every row retention deleted go too."""
    return con.execute("DELETE FROM unit_summaries s WHERE NOT EXISTS "
                       "(SELECT 1 FROM units u WHERE u.node = s.node AND u.unit = s.unit)").fetchone()[0]

"""Task records with their params and counters unpacked, one column per key: what the causal
models are learnt from."""

from __future__ import annotations

import pandas as pd

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared


def task_apps(con: Cursor) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT app FROM tasks ORDER BY app").fetchall()]


def task_df(con: Cursor, app: str | None = None, since: float | None = None,
            started: tuple[float, float] | None = None, limit: int | None = None,
            last: int | None = None) -> tuple[pd.DataFrame, dict, dict]:
    """Tasks received after `since` (and started within `started`, both ends included), the first
    `limit` received, or the `last` received (all: None), with their params and counters JSON unpacked,
    one column per key, in the order received.

    Returns (df, params, counters): df has received, node, boot, pid and thread (where the task ran, as
    its region records name it), t_start, bbv (the task's code vector as JSON), duration, cpu_seconds and
    columns p0.. / c0.. in the order of the two key lists, which map each positional column to its
    agent-supplied key (analytics.causal.features names them).
    """
    where, params = "TRUE", []
    if app is not None:
        where, params = "t.app = ?", [app]
    if since is not None:
        where, params = f"{where} AND l.received > ?", params + [since]
    if started is not None:
        where, params = f"{where} AND t.t_start BETWEEN ? AND ?", params + list(started)
    joined = "tasks t JOIN ingest_log l USING (node, boot, seq)"
    if last is not None:   # from the last-th newest's commit on (a commit's tasks share its time), cut below
        cutoff = con.execute(f"SELECT l.received FROM {joined} WHERE {where} ORDER BY l.received DESC "
                             "LIMIT 1 OFFSET ?", params + [max(last - 1, 0)]).fetchone()
        if cutoff:
            where, params = f"{where} AND l.received >= ?", params + [cutoff[0]]
    pkeys, ckeys = (shared.json_keys(con, joined, f"t.{column}", where, params) for column in ("params", "counters"))
    cols = "".join(f", json_extract_string(t.params, ?) AS p{i}" for i in range(len(pkeys)))
    cols += "".join(f", TRY_CAST(json_extract_string(t.counters, ?) AS DOUBLE) AS c{i}" for i in range(len(ckeys)))
    pointers = [shared.json_pointer(k) for k in pkeys + ckeys]
    sql = (f"SELECT l.received, t.node, t.boot, t.extra->>'pid' AS pid, t.extra->>'thread' AS thread, "
           f"t.t_start, t.bbv, t.duration, t.cpu_seconds{cols} "
           f"FROM {joined} WHERE {where} ORDER BY l.received, t.node, t.seq LIMIT ?")
    df = con.execute(sql, pointers + params + [limit]).df()
    if last is not None and len(df) > last:
        df = df.iloc[len(df) - last:].reset_index(drop=True)
    return df, {f"p{i}": k for i, k in enumerate(pkeys)}, {f"c{i}": k for i, k in enumerate(ckeys)}


def task_cpu(con: Cursor, app: str, start: float, end: float, limit: int = 500_000) -> pd.DataFrame:
    """The node, start and CPU seconds of each task of `app` started in [start, end], oldest first (the
    first `limit`): where an app ran, and the CPU its tasks took there."""
    return shared.fetch(con, "SELECT node, t_start, cpu_seconds FROM tasks WHERE app = ? AND t_start BETWEEN ? AND ? "
                             "ORDER BY t_start LIMIT ?", [app, start, end, limit])

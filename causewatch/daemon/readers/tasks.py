"""Task records with their params and counters unpacked, one column per key: what the causal
models are learnt from, per scope: an app's tasks (`app:NAME`), or those of its tasks that ran in one Slurm
job (`app:NAME@job:ID`, by the job id the agent tagged them with)."""

from __future__ import annotations

import pandas as pd

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared

JOB = "@job:"   # between an app's scope and the Slurm job its tasks ran in
_JOB_ID = "json_extract_string(t.extra, '$.job_id')"


def scope_of(app: str, job: str | None = None) -> str:
    return f"app:{app}" if job is None else f"app:{app}{JOB}{job}"


def app_and_job(scope: str) -> tuple[str, str | None]:
    """The app and the Slurm job (None: every job's) a causal scope learns from."""
    app, _, job = scope.removeprefix("app:").partition(JOB)
    return app, job or None


def task_jobs(con: Cursor, app: str, since: float | None) -> dict[str, float]:
    """The Slurm jobs of `app`'s tasks received after `since` (None: ever), each with its newest's receipt."""
    return dict(con.execute(
        f"SELECT {_JOB_ID} AS job, max(l.received) FROM tasks t JOIN ingest_log l USING (node, boot, seq) "
        "WHERE t.app = ? AND (? IS NULL OR l.received > ?) AND job IS NOT NULL GROUP BY job ORDER BY job",
        [app, since, since]).fetchall())


def task_apps(con: Cursor) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT app FROM tasks ORDER BY app").fetchall()]


def task_df(con: Cursor, app: str | None = None, since: float | None = None,
            started: tuple[float, float] | None = None, limit: int | None = None,
            last: int | None = None, job: str | None = None) -> tuple[pd.DataFrame, dict, dict]:
    """Tasks (of Slurm job `job`: None, any) received after `since` (and started within `started`, both ends
    included), the first
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
    if job is not None:
        where, params = f"{where} AND {_JOB_ID} = ?", params + [job]
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


def task_cpu(con: Cursor, app: str, start: float, end: float, limit: int = 500_000,
             job: str | None = None) -> pd.DataFrame:
    """The node, start and CPU seconds of each task of `app` (in Slurm job `job`: None, any) started in
    [start, end], oldest first (the first `limit`): where an app ran, and the CPU its tasks took there."""
    return shared.fetch(con, "SELECT node, t_start, cpu_seconds FROM tasks t WHERE app = ? AND t_start BETWEEN ? "
                             f"AND ? AND (? IS NULL OR {_JOB_ID} = ?) ORDER BY t_start LIMIT ?",
                        [app, start, end, job, job, limit])

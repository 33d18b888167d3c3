"""Every read of the daemon's store tables (the writer, store.py, owns every write), as DataFrames.

Agent-supplied names (counter, parameter and metric keys) reach SQL only as bound parameters: a key
becomes a JSON Pointer (`json_pointer`), never a path or identifier spliced into the SQL text.
"""

from __future__ import annotations

import json
import re

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from causewatch.analytics.fuzzy.summaries import BASE_METRICS, KEYS, metric_name
from causewatch.errors import InputError

TABLES = ("nodes", "samples", "samples_minute", "bbv", "tasks", "regions", "models", "edges", "anomalies", "scores",
          "probe_kits", "probe_results", "ingest_log")
# Counters that are already ratios or rates are averaged (weighted by duration), the rest summed.
_RATIO = re.compile(r"(_ratio|_share|_rate|_per_second)$|^(ipc|cpi)$")


def json_pointer(key: str) -> str:
    """The one rule for addressing an agent-supplied key inside a JSON column (RFC 6901)."""
    return "/" + key.replace("~", "~0").replace("/", "~1")


def open_store(path: str, need: tuple[str, ...] = ()) -> duckdb.DuckDBPyConnection:
    """A stopped daemon's store, read-only; a locked file or one without the `need`ed tables is refused
    by name (a running daemon is read through its HTTP API instead)."""
    try:
        con = duckdb.connect(path, read_only=True)
    except duckdb.Error as e:
        hint = " (a running daemon holds its store: read it through the daemon's HTTP API)" \
            if "lock" in str(e).lower() else ""
        raise InputError(f"{path}: cannot open the DuckDB store read-only ({e}){hint}") from None
    missing = set(need) - set(table_names(con))
    if missing:
        con.close()
        raise InputError(f"{path}: not a causewatch store (no table {', '.join(sorted(missing))})")
    return con


def table_names(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]


def read_table(con, table: str) -> pd.DataFrame:
    """A whole table of any DuckDB file (e.g. `causewatch experiment`'s output), named by a checked name."""
    if table not in table_names(con):
        raise InputError(f"no table {table!r} (tables: {', '.join(table_names(con)) or 'none'})")
    return con.execute(f'SELECT * FROM "{table}"').df()   # the name is one of the file's own tables


# ---- ingest and node facts ---------------------------------------------------------------------

def table_counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def samples_per_metric(con) -> dict[str, int]:
    return dict(con.execute("SELECT metric, count(*) FROM samples GROUP BY metric ORDER BY metric").fetchall())


def nodes(con) -> list[dict]:
    return _records(con.execute("SELECT * EXCLUDE (counters, extra) FROM nodes ORDER BY node"))


def _records(cur) -> list[dict]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


# ---- region summaries (PERFQL, bottlenecks, the fuzzy job) ---------------------------------------

def _where(since, until, nodes_, time_col: str) -> tuple[str, list]:
    clauses, params = ["TRUE"], []
    if since is not None:
        clauses.append(f"{time_col} >= ?")
        params.append(float(since))
    if until is not None:
        clauses.append(f"{time_col} < ?")
        params.append(float(until))
    if nodes_:
        clauses.append(f"node IN ({', '.join('?' * len(nodes_))})")
        params += list(nodes_)
    return " AND ".join(clauses), params


def _json_keys(con, table: str, column: str, where: str, params: list) -> list[str]:
    rows = con.execute(f"SELECT DISTINCT unnest(json_keys({column})) FROM {table} "
                       f"WHERE {column} IS NOT NULL AND {where}", params).fetchall()
    return sorted(r[0] for r in rows)


def _strings_as_arrow(t: pa.DataType):
    return pd.ArrowDtype(t) if pa.types.is_string(t) or pa.types.is_large_string(t) else None


def _fetch(con, sql: str, params: list) -> pd.DataFrame:
    """A query's rows as a DataFrame whose text columns stay Arrow strings: a million region names
    as Python str objects would cost more than the whole aggregation."""
    return con.sql(sql, params=params).to_arrow_table().to_pandas(types_mapper=_strings_as_arrow)


def _regions(con, since, until, nodes_, metrics) -> pd.DataFrame:
    where, params = _where(since, until, nodes_, "t_start")
    keys = _json_keys(con, "regions", "counters", where, params)
    if metrics is not None:   # compared as metric names, case-insensitively: a misspelt one is missing
        wanted = {m.lower() for m in metrics}
        keys = [k for k in keys if metric_name(k).lower() in wanted]
    # Keys that name the same metric (cache-misses, cache_misses): the first in sorted order is kept.
    keys = list({metric_name(k): k for k in reversed(keys)}.values())[::-1]
    # One JSON parse per row for all the counters wanted (a list of pointers, bound), not one per key.
    extract = ", json_extract_string(counters, ?::VARCHAR[]) AS c" if keys else ""
    counters = "".join(_counter_sql(k, i + 1) for i, k in enumerate(keys))
    # The program's span per (node, app) is a small second aggregate joined back: cheaper than a window.
    sql = f"""
        WITH r AS (SELECT node, app, region, t_start, duration, calls, cpu_seconds, extra {extract}
                   FROM regions WHERE {where}),
        agg AS (SELECT node, app, region, 'region' AS source,
                       any_value(json_extract_string(extra, '$.parent')) AS parent, sum(duration) AS duration,
                       sum(calls)::DOUBLE AS calls, sum(cpu_seconds) AS cpu_seconds {counters}
                FROM r GROUP BY node, app, region),
        p AS (SELECT node, app, max(t_start + duration) - min(t_start) AS span FROM r GROUP BY node, app)
        SELECT agg.*, agg.duration / nullif(p.span, 0) AS time_share FROM agg JOIN p USING (node, app)"""
    frame = _fetch(con, sql, ([[json_pointer(k) for k in keys]] if keys else []) + params)
    return frame.rename(columns={f"c{i + 1}": metric_name(k) for i, k in enumerate(keys)})


def _counter_sql(key: str, i: int) -> str:
    """The aggregate of counter i (a positional column c{i}, renamed after the query)."""
    value = f"TRY_CAST(c[{i}] AS DOUBLE)"
    if _RATIO.search(key):
        return (f", sum({value} * duration) / nullif(sum(CASE WHEN {value} IS NULL THEN 0 ELSE duration END), 0)"
                f" AS c{i}")
    return f", sum({value}) AS c{i}"


def _bbv(con, since, until, nodes_) -> pd.DataFrame:
    where, params = _where(since, until, nodes_, "t_start")
    sql = f"""
        WITH b AS (SELECT * FROM bbv WHERE {where}),
        v AS (SELECT node, boot, seq, any_value(target) AS target, any_value(kind) AS kind,
                     any_value(t_end - t_start) AS span, sum(count) AS total
              FROM b GROUP BY node, boot, seq),
        f AS (SELECT b.node, v.target, v.kind, b.key, sum(b.count)::DOUBLE AS samples,
                     sum(b.count / v.total * v.span) AS duration
              FROM b JOIN v USING (node, boot, seq) GROUP BY ALL),
        t AS (SELECT node, target, kind, sum(span) AS total_time, sum(total) AS total_samples
              FROM v GROUP BY ALL)
        SELECT f.node, f.target AS app, f.key AS region, 'bbv' AS source, f.duration, f.samples,
               coalesce(f.duration / nullif(t.total_time, 0), f.samples / t.total_samples) AS time_share
        FROM f JOIN t USING (node, target, kind)"""
    return _fetch(con, sql, params)


def region_summaries(con, since: float | None = None, until: float | None = None,
                     nodes: list[str] | None = None, metrics=None) -> pd.DataFrame:
    """One row per (node, app, region, source) over records starting in [since, until), instrumented
    regions first, in no particular order otherwise.

    Columns: node, app, region, source ('region' or 'bbv'), parent (instrumented regions whose extra
    names one), duration, calls, cpu_seconds, samples, time_share and one column per counter key of
    the regions' counters JSON (names made identifier-safe by metric_name). `metrics` limits the
    counter columns to those names (what a query needs); None means every key found in the window.
    A metric a row does not have is NaN.
    """
    parts = [_regions(con, since, until, nodes, metrics), _bbv(con, since, until, nodes)]
    frame = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    for col in BASE_METRICS:
        if col not in frame:
            frame[col] = np.nan
    numeric = [c for c in frame.columns if c not in KEYS and c != "parent"]
    frame[numeric] = frame[numeric].astype(float)
    return frame


# ---- phase vectors -------------------------------------------------------------------------------

BBV_IDENT = ["node", "boot", "seq", "target", "kind", "t_start", "t_end"]


def bbv_targets(con) -> pd.DataFrame:
    """(target, kind, vectors) of every vector kind stored, most vectors first."""
    return con.execute("SELECT target, kind, count(DISTINCT (node, boot, seq)) AS vectors FROM bbv "
                       "GROUP BY ALL ORDER BY vectors DESC, target, kind").df()


def bbv_rows(con, target: str, kind: str) -> pd.DataFrame:
    """The stored vectors of one target and kind in their long form (a row per vector and key),
    oldest vector first."""
    return con.execute(f"SELECT {', '.join(BBV_IDENT)}, key, count FROM bbv WHERE target = ? AND kind = ? "
                       "ORDER BY t_start, node, boot, seq", [target, kind]).df()


def bbv_matrix(df: pd.DataFrame) -> tuple[sp.csr_matrix, list[str], list[tuple]]:
    """`bbv_rows` as a CSR matrix: (X, keys, index) where index[i] = (node, boot, seq, target, kind,
    t_start, t_end) of row i."""
    if df.empty:
        return sp.csr_matrix((0, 1)), [], []
    # groups are numbered in order of first appearance, the same order drop_duplicates keeps
    row_codes = df.groupby(BBV_IDENT, sort=False, dropna=False).ngroup().to_numpy()
    rows = list(df[BBV_IDENT].drop_duplicates().itertuples(index=False, name=None))
    key_codes, key_uniques = df["key"].factorize()
    X = sp.csr_matrix((df["count"].to_numpy(float), (row_codes, key_codes)), shape=(len(rows), len(key_uniques)))
    return X, list(key_uniques), rows


# ---- tasks (causal models) -----------------------------------------------------------------------

def task_apps(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT app FROM tasks ORDER BY app").fetchall()]


def task_frame(con, app: str | None = None, since: float | None = None,
               started: tuple[float, float] | None = None) -> tuple[pd.DataFrame, dict, dict]:
    """Tasks received after `since` (and started within `started`, both ends included) with their
    params and counters JSON unpacked, one column per key.

    Returns (frame, params, counters): frame has received, t_start, bbv (the task's code vector as
    JSON), duration, cpu_seconds and columns p0.. / c0.. in the order of the two key lists, which map
    each positional column to its agent-supplied key (analytics.causal.features names them).
    """
    where, params = "TRUE", []
    if app is not None:
        where, params = "t.app = ?", [app]
    if since is not None:
        where, params = f"{where} AND l.received > ?", params + [since]
    if started is not None:
        where, params = f"{where} AND t.t_start BETWEEN ? AND ?", params + list(started)
    joined = "tasks t JOIN ingest_log l USING (node, boot, seq)"
    pkeys, ckeys = (_json_keys(con, joined, f"t.{column}", where, params) for column in ("params", "counters"))
    cols = "".join(f", json_extract_string(t.params, ?) AS p{i}" for i in range(len(pkeys)))
    cols += "".join(f", TRY_CAST(json_extract_string(t.counters, ?) AS DOUBLE) AS c{i}" for i in range(len(ckeys)))
    pointers = [json_pointer(k) for k in pkeys + ckeys]
    sql = (f"SELECT l.received, t.t_start, t.bbv, t.duration, t.cpu_seconds{cols} "
           f"FROM {joined} WHERE {where} ORDER BY l.received, t.node, t.seq")
    frame = con.execute(sql, pointers + params).df()
    return frame, {f"p{i}": k for i, k in enumerate(pkeys)}, {f"c{i}": k for i, k in enumerate(ckeys)}


def samples_frame(con, metrics: list[str] | None = None, scope: str | None = None) -> pd.DataFrame:
    """Stored samples in their long form (node, ts, scope, metric, value), oldest first."""
    where, params = ["TRUE"], []
    if metrics:
        where.append(f"metric IN ({', '.join('?' * len(metrics))})")
        params += list(metrics)
    if scope is not None:
        where.append("scope = ?")
        params.append(scope)
    return con.execute(f"SELECT node, ts, scope, metric, value FROM samples WHERE {' AND '.join(where)} "
                       "ORDER BY ts", params).df()


# ---- models, baselines, anomalies ---------------------------------------------------------------

def model_scopes(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT scope FROM models ORDER BY scope").fetchall()]


def models(con, scope: str | None = None) -> list[dict]:
    """Model versions, newest first: model_id, scope, window, rows, when, edge count, baseline or not."""
    return _records(con.execute("""
        SELECT m.model_id, m.scope, m.window_start, m.window_end, m.n_rows, m.learned_at,
               (SELECT count(*) FROM edges e WHERE e.model_id = m.model_id) AS edges,
               b.model_id IS NOT NULL AS baseline
        FROM models m LEFT JOIN baselines b ON b.scope = m.scope AND b.model_id = m.model_id
        WHERE ? IS NULL OR m.scope = ? ORDER BY m.model_id DESC""", [scope, scope]))


def model_graph(con, scope: str, model_id: int | None = None) -> tuple[int, dict] | None:
    """(model_id, graph JSON as a dict) of `scope`'s newest model, or of version `model_id`."""
    row = con.execute("SELECT model_id, graph FROM models WHERE scope = ? AND (? IS NULL OR model_id = ?) "
                      "ORDER BY model_id DESC LIMIT 1", [scope, model_id, model_id]).fetchone()
    return None if row is None else (row[0], json.loads(row[1]))


def model_window(con, model_id: int) -> tuple[float, float]:
    """(window_start, window_end): the first and last task start a model version was learnt from."""
    return con.execute("SELECT window_start, window_end FROM models WHERE model_id = ?", [model_id]).fetchone()


def model_record(con, scope: str | None = None, model_id: int | None = None) -> dict:
    """{scope, model_id, baseline, **graph} of `scope`'s newest model or version `model_id`; without a
    scope, the only one there is. A scope or version that does not exist is an InputError naming it."""
    if scope is None:
        scopes = model_scopes(con)
        if len(scopes) != 1:
            raise InputError(f"scope: give one of {', '.join(scopes)}" if scopes else "scope: no model learnt yet")
        scope = scopes[0]
    found = model_graph(con, scope, model_id)
    if found is None:
        raise InputError(f"scope {scope!r} has no model" + (f" {model_id}" if model_id is not None else ""))
    return {"scope": scope, "model_id": found[0], "baseline": baseline(con, scope), **found[1]}


def baseline(con, scope: str) -> dict | None:
    """{model_id, chosen, how} of `scope`'s baseline, or None while it has none."""
    rows = _records(con.execute("SELECT model_id, chosen, how FROM baselines WHERE scope = ?", [scope]))
    return rows[0] if rows else None


def anomalies(con, scope: str | None = None, open_only: bool = False, limit: int = 200) -> list[dict]:
    """Anomalies newest first (open ones have resolved = None), evidence decoded."""
    rows = _records(con.execute("""
        SELECT anomaly_id, scope, kind, src, dst, opened, updated, resolved, baseline_id, model_id, score,
               threshold, evidence
        FROM anomalies WHERE (? IS NULL OR scope = ?) AND (NOT ? OR resolved IS NULL)
        ORDER BY opened DESC, anomaly_id DESC LIMIT ?""", [scope, scope, open_only, limit]))
    for row in rows:
        row["evidence"] = json.loads(row["evidence"]) if row["evidence"] else {}
    return rows


# ---- probes --------------------------------------------------------------------------------------

def registered_kits(con) -> list[dict]:
    """Every registered kit as {app, kit, path, manifest}."""
    rows = con.execute("SELECT app, kit, path, manifest FROM probe_kits ORDER BY app, kit").fetchall()
    return [{"app": a, "kit": k, "path": p, "manifest": json.loads(m) if m else None} for a, k, p, m in rows]


def newest_probes(con, node: str | None = None) -> dict[tuple[str, str, str], dict]:
    """(node, app, kit) -> {ts, facts} of the newest result of each kit on each node (or on `node`);
    facts is None for a result stored before they were recorded."""
    where, params = ("WHERE node = ?", [node]) if node is not None else ("", [])
    rows = con.execute(f"SELECT node, app, kit, max(ts), arg_max(facts, ts) FROM probe_results {where} "
                       "GROUP BY ALL", params).fetchall()
    return {(n, a, k): {"ts": ts, "facts": json.loads(f) if f else None} for n, a, k, ts, f in rows}


def latest_probes(con, app: str) -> list[dict]:
    """Each node's newest probe result for `app`, fastest predicted first."""
    rows = _records(con.execute("""
        SELECT node, kit, ts, predicted_seconds, lo, hi, ratio, probe_seconds, phases FROM (
            SELECT *, row_number() OVER (PARTITION BY node ORDER BY ts DESC, seq DESC) AS newest
            FROM probe_results WHERE app = ?)
        WHERE newest = 1 ORDER BY predicted_seconds, node""", [app]))
    for row in rows:
        row["phases"] = json.loads(row["phases"]) if row["phases"] else []
    return rows


def predicted_times(con) -> list[tuple[str, str, float]]:
    """(app, node, predicted seconds) of every node's latest probe of every app."""
    return con.execute("SELECT app, node, arg_max(predicted_seconds, ts) FROM probe_results "
                       "GROUP BY app, node ORDER BY app, node").fetchall()


# ---- what the demo reports -----------------------------------------------------------------------

LIVE_COUNTS = {"frames": "SELECT count(*) FROM ingest_log", "sample rows": "SELECT count(*) FROM samples",
               "metrics": "SELECT count(DISTINCT metric) FROM samples",
               "phase vectors": "SELECT count(DISTINCT (node, boot, seq)) FROM bbv",
               "tasks": "SELECT count(*) FROM tasks", "regions": "SELECT count(*) FROM regions"}


def live_counts(con) -> dict[str, int]:
    return {name: con.execute(sql).fetchone()[0] for name, sql in LIVE_COUNTS.items()}


# The newest model's edges, each with how many of its scope's versions hold the pair (either way round):
# an edge most versions hold is stable; one that comes and goes is near the test's threshold.
NEWEST_EDGES = """
    WITH newest AS (SELECT model_id, scope FROM models ORDER BY model_id DESC LIMIT 1),
         versions AS (SELECT m.model_id FROM models m JOIN newest n USING (scope)),
         held AS (SELECT least(src, dst) a, greatest(src, dst) b, count(DISTINCT model_id) n FROM edges
                  WHERE model_id IN (SELECT model_id FROM versions) GROUP BY ALL)
    SELECT e.src, e.dst, round(e.strength, 3) strength_bits, e.directed, h.n held_by,
           (SELECT count(*) FROM versions) versions
    FROM edges e JOIN held h ON h.a = least(e.src, e.dst) AND h.b = greatest(e.src, e.dst)
    WHERE e.model_id = (SELECT model_id FROM newest) ORDER BY e.strength DESC, e.src, e.dst"""


def overview(con) -> dict:
    """Everything the demo's report shows: ingest figures, then each analysis' latest output."""
    rows = lambda sql: _records(con.execute(sql))   # noqa: E731
    return {
        "frames_by_type": {r["type"]: r["n"] for r in rows("SELECT type, count(*) n FROM ingest_log GROUP BY type")},
        "sample_values": con.execute("SELECT count(*) FROM samples").fetchone()[0],
        "rows_per_metric": {f'{r["scope"]}/{r["metric"]}': r["n"] for r in rows(
            "SELECT scope, metric, count(*) n FROM samples GROUP BY ALL ORDER BY scope, metric")},
        "nodes": [dict(r, counters=_availability(r["counters"])) for r in rows(
            "SELECT node, hostname, cores, counters FROM nodes ORDER BY node")],
        "phase_vectors": rows("SELECT kind, count(DISTINCT (node, boot, seq)) vectors, count(DISTINCT key) functions "
                              "FROM bbv GROUP BY kind"),
        "top_functions": rows("SELECT key, sum(count) samples FROM bbv GROUP BY key ORDER BY samples DESC LIMIT 5"),
        "tasks": rows("SELECT app, count(*) tasks, round(avg(duration), 4) mean_seconds FROM tasks GROUP BY app"),
        "causal_edges": rows(NEWEST_EDGES),
        "causal_submodels": [{"variable": v, **sub} for v, sub in latest_submodels(con).items()],
        "anomalies": rows("SELECT scope, kind, src, dst, round(score, 3) score, round(threshold, 3) threshold, "
                          "CASE WHEN resolved IS NULL THEN 'open' ELSE 'resolved' END state "
                          "FROM anomalies ORDER BY opened DESC LIMIT 5"),
        "bottlenecks": rows("SELECT node, region, metric, term, round(degree, 3) degree FROM scores "
                            "WHERE ts = (SELECT max(ts) FROM scores) ORDER BY severity DESC LIMIT 8"),
    }


def _availability(counters_json: str | None) -> dict:
    """hello's {event: "ok" | reason} as {"ok": n, reason: n, ...}."""
    counts: dict[str, int] = {}
    for state in json.loads(counters_json or "{}").values():
        counts[state] = counts.get(state, 0) + 1
    return counts


def latest_submodels(con) -> dict:
    """The newest model's MDL submodels ({variable: {kind, formula, bits}})."""
    row = con.execute("SELECT graph->'submodels' FROM models ORDER BY model_id DESC LIMIT 1").fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def perfql_matches(con, query, since: float | None = None, until: float | None = None,
                   nodes: list[str] | None = None, min_degree: float = 0.0, top: int | None = None) -> pd.DataFrame:
    """A parsed PERFQL `query` (analytics.fuzzy.perfql.Query) over the region summaries it needs."""
    frame = region_summaries(con, since, until, nodes, metrics=query.required_metrics())
    return query.evaluate(frame, min_degree, top)


# ---- retention: per-minute aggregates of samples -------------------------------------------------

def samples_minute(con, since: float | None = None, until: float | None = None) -> pd.DataFrame:
    """Per-minute aggregates (node, scope, metric, minute, count, mean, min, max) with since <= minute
    < until, oldest first."""
    where, params = _where(since, until, None, "minute")
    return con.execute(f"SELECT * FROM samples_minute WHERE {where} ORDER BY minute, node, scope, metric",
                       params).df()


def rollup_bounds(con) -> tuple[float | None, float | None]:
    """(oldest raw sample ts, end of the newest aggregated minute): where a roll-up resumes."""
    lo = con.execute("SELECT min(ts) FROM samples").fetchone()[0]
    end = con.execute("SELECT max(minute) + 60 FROM samples_minute").fetchone()[0]
    return lo, end

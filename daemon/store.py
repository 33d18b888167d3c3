"""The DuckDB store: versioned schema migrations and the batch writer used by the ingest thread.

One Store owns one DuckDB file; only the daemon's writer thread calls `commit_frames` and `run`.
Readers in the same process take `cursor()`s. Exactly-once: (node, boot, seq) is in ingest_log
once, in the same transaction as the frame's rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from causewatch import wire

# The facts of a node that a probe result depends on, as one JSON object from a `nodes` row aliased n:
# the machine's boot (the agent's hello carries /proc/sys/kernel/random/boot_id) and its hardware.
NODE_FACTS_SQL = ("json_object('boot_id', n.extra->>'$.boot_id', 'cpu_model', n.cpu_model, "
                  "'cores', n.cores, 'memory_bytes', n.memory_bytes)")


def hello_facts(body: dict) -> dict:
    """NODE_FACTS_SQL's facts from a hello's body, as its nodes row gives them once stored: what a job
    judges one hello by when later hellos of the node may already have replaced the row."""
    boot_id = (body.get("extra") or {}).get("boot_id")
    return {"boot_id": None if boot_id is None else str(boot_id), "cpu_model": body.get("cpu_model"),
            "cores": body.get("cores"), "memory_bytes": body.get("memory_bytes")}

MIGRATIONS: list[tuple[int, str]] = [
    (1, """
    CREATE TABLE nodes (node VARCHAR PRIMARY KEY, hostname VARCHAR, cpu_model VARCHAR, cores INTEGER,
        memory_bytes BIGINT, agent_version VARCHAR, counters JSON, extra JSON, boot VARCHAR,
        first_seen DOUBLE, last_seen DOUBLE);
    CREATE TABLE ingest_log (node VARCHAR, boot VARCHAR, seq BIGINT, type VARCHAR, ts DOUBLE,
        received DOUBLE, PRIMARY KEY (node, boot, seq));
    CREATE TABLE samples (node VARCHAR, ts DOUBLE, scope VARCHAR, metric VARCHAR, value DOUBLE);
    CREATE TABLE bbv (node VARCHAR, boot VARCHAR, seq BIGINT, target VARCHAR, kind VARCHAR,
        t_start DOUBLE, t_end DOUBLE, key VARCHAR, count BIGINT);
    CREATE TABLE tasks (node VARCHAR, boot VARCHAR, seq BIGINT, app VARCHAR, task_id VARCHAR,
        t_start DOUBLE, duration DOUBLE, cpu_seconds DOUBLE, params JSON, counters JSON, bbv JSON, extra JSON);
    CREATE TABLE regions (node VARCHAR, boot VARCHAR, seq BIGINT, app VARCHAR, region VARCHAR,
        t_start DOUBLE, duration DOUBLE, calls BIGINT, cpu_seconds DOUBLE, counters JSON, bbv JSON, extra JSON);
    CREATE TABLE models (model_id BIGINT PRIMARY KEY, scope VARCHAR, window_start DOUBLE, window_end DOUBLE,
        n_rows BIGINT, learned_at DOUBLE, graph JSON);
    CREATE TABLE edges (model_id BIGINT, src VARCHAR, dst VARCHAR, strength DOUBLE, directed BOOLEAN);
    CREATE TABLE anomalies (ts DOUBLE, scope VARCHAR, model_id BIGINT, variable VARCHAR, score DOUBLE, detail JSON);
    CREATE TABLE scores (ts DOUBLE, node VARCHAR, app VARCHAR, region VARCHAR, source VARCHAR, metric VARCHAR,
        value DOUBLE, term VARCHAR, degree DOUBLE, severity DOUBLE);
    CREATE TABLE probe_kits (app VARCHAR, kit VARCHAR, path VARCHAR, manifest JSON, registered DOUBLE,
        PRIMARY KEY (app, kit));
    CREATE TABLE probe_results (node VARCHAR, boot VARCHAR, seq BIGINT, ts DOUBLE, app VARCHAR, kit VARCHAR,
        predicted_seconds DOUBLE, lo DOUBLE, hi DOUBLE, ratio DOUBLE, probe_seconds DOUBLE, phases JSON);
    """),
    # Anomalies with a lifecycle (raised once, updated while they last, resolved when gone) against a
    # per-scope baseline model; the version-1 rows were point events and are not carried over.
    (2, """
    DROP TABLE anomalies;
    CREATE TABLE anomalies (anomaly_id BIGINT PRIMARY KEY, scope VARCHAR, kind VARCHAR, src VARCHAR, dst VARCHAR,
        opened DOUBLE, updated DOUBLE, resolved DOUBLE, baseline_id BIGINT, model_id BIGINT, score DOUBLE,
        threshold DOUBLE, evidence JSON);
    CREATE TABLE baselines (scope VARCHAR PRIMARY KEY, model_id BIGINT, chosen DOUBLE, how VARCHAR);
    """),
    # every field the wire accepts is stored: a bbv frame's pid and lost IP samples, a probe result's extra
    (3, """
    ALTER TABLE bbv ADD COLUMN pid BIGINT;
    ALTER TABLE bbv ADD COLUMN lost BIGINT;
    ALTER TABLE probe_results ADD COLUMN extra JSON;
    """),
    # Retention: per-minute aggregates of `samples` (minute = epoch second the minute starts), kept
    # longer than the raw rows; count, mean, min and max are of the non-null values.
    (4, """
    CREATE TABLE samples_minute (node VARCHAR, scope VARCHAR, metric VARCHAR, minute DOUBLE, count BIGINT,
        mean DOUBLE, min DOUBLE, max DOUBLE);
    """),
    # The node facts a probe result was taken under (machine boot id, cpu model, cores, memory): a hello
    # whose facts differ gets the kit again. Older results keep NULL (only their age counts).
    (5, "ALTER TABLE probe_results ADD COLUMN facts JSON"),
]


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the schema up to the newest migration; return the version now in force."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied DOUBLE)")
    current = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
    for version, sql in MIGRATIONS:
        if version > current:
            con.begin()
            con.execute(sql)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, time.time()])
            con.commit()
            current = version
    return current


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def _coded(codes: np.ndarray, words: dict[str, int]) -> pa.DictionaryArray:
    """A string column as dictionary codes: no Python string per row (codes valid by construction)."""
    return pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(list(words), pa.string()), safe=False)


def samples_table(frames: list[wire.Frame]) -> pa.Table:
    """The frames' values (T x M each, row-major) as one single-chunk Arrow table: DuckDB inserts one
    long chunk faster than a chunk per frame. Each column is filled in place, one slice per frame (no
    per-frame temporaries to concatenate): it runs on the writer thread, between DuckDB's inserts."""
    cols = [wire.samples_arrays(f.body) for f in frames]
    total = sum(values.size for _, _, values, _ in cols)
    node, scope, metric = (np.empty(total, np.int32) for _ in range(3))
    ts, value = np.empty(total), np.empty(total)
    mask = np.zeros(total, bool) if any(m is not None for *_, m in cols) else None
    nodes: dict[str, int] = {}
    scopes: dict[str, int] = {}
    metrics: dict[str, int] = {}
    metric_codes: dict[tuple, np.ndarray] = {}   # agents send the same names frame after frame
    start = 0
    for f, (t, names, v, m) in zip(frames, cols):
        end = start + v.size
        key = tuple(names)
        codes = metric_codes.get(key)
        if codes is None:
            codes = metric_codes[key] = np.array([metrics.setdefault(n, len(metrics)) for n in names], np.int32)
        node[start:end] = nodes.setdefault(f.node, len(nodes))
        scope[start:end] = scopes.setdefault(f.body["scope"], len(scopes))
        metric[start:end].reshape(v.shape)[:] = codes
        ts[start:end].reshape(v.shape)[:] = t[:, None]
        value[start:end] = v.ravel()
        if m is not None:
            mask[start:end] = m.ravel()
        start = end
    return pa.table({"node": _coded(node, nodes), "ts": ts, "scope": _coded(scope, scopes),
                     "metric": _coded(metric, metrics), "value": pa.array(value, mask=mask)})


def _bbv_rows(f: wire.Frame) -> list[tuple]:
    b, vec = f.body, f.body["vector"]
    return [(f.node, f.boot, f.seq, b["target"], b["kind"], b["start"], b["end"], k, c, b.get("pid"), b.get("lost"))
            for k, c in zip(vec["keys"], vec["counts"])]


def _task_row(f: wire.Frame) -> tuple:
    b = f.body
    return (f.node, f.boot, f.seq, b["app"], b["task_id"], b["start"], b["duration"], b.get("cpu_seconds"),
            _json(b.get("params")), _json(b.get("counters")), _json(b.get("bbv")), _json(b.get("extra")))


def _region_row(f: wire.Frame) -> tuple:
    b = f.body
    return (f.node, f.boot, f.seq, b["app"], b["region"], b["start"], b["duration"], b.get("calls"),
            b.get("cpu_seconds"), _json(b.get("counters")), _json(b.get("bbv")), _json(b.get("extra")))


def _probe_row(f: wire.Frame) -> tuple:
    b = f.body
    return (f.node, f.boot, f.seq, f.ts, b["app"], b["kit"], b["predicted_seconds"], b["lo"], b["hi"],
            b["ratio"], b["probe_seconds"], _json(b.get("phases")), _json(b.get("extra")), None)


@dataclass
class Verdicts:
    """What a batch commit decided per frame: stored (new) or duplicate (already stored)."""
    stored: list[wire.Frame] = field(default_factory=list)
    duplicate: list[wire.Frame] = field(default_factory=list)


class Store:
    """Owns one DuckDB file: migrations at open, exactly-once batch commits, reader cursors."""

    def __init__(self, path: str, memory_bytes: int | None = None):
        self.path = path
        self.con = duckdb.connect(path, config={"memory_limit": f"{memory_bytes}B"} if memory_bytes else {})
        self.version = migrate(self.con)
        self._columns: dict[str, list[str]] = {}
        # Highest stored seq per (node, boot): a frame above it is new without a look-up; at or below it,
        # ingest_log decides (frames may arrive out of order: that is no reason to drop one).
        self._high = {(n, b): s for n, b, s in self.con.execute(
            "SELECT node, boot, max(seq) FROM ingest_log GROUP BY ALL").fetchall()}

    def cursor(self) -> duckdb.DuckDBPyConnection:
        return self.con.cursor()

    def close(self) -> None:
        self.con.close()

    def _classify(self, frames: list[wire.Frame]) -> Verdicts:
        """New = (node, boot, seq) neither in ingest_log nor earlier in this batch; order does not matter."""
        verdicts, seen = Verdicts(), set()
        maybe = [f for f in frames if f.seq <= self._high.get((f.node, f.boot), 0)]
        logged = self._logged(maybe) if maybe else set()
        for f in frames:
            key = (f.node, f.boot, f.seq)
            (verdicts.duplicate if key in seen or key in logged else verdicts.stored).append(f)
            seen.add(key)
        return verdicts

    def _logged(self, frames: list[wire.Frame]) -> set[tuple[str, str, int]]:
        """Which of these frames' (node, boot, seq) are already in ingest_log: one join, not a query each."""
        keys = pa.table({"node": [f.node for f in frames], "boot": [f.boot for f in frames],  # noqa: F841
                         "seq": pa.array([f.seq for f in frames], pa.int64())})
        return set(self.con.execute("SELECT l.node, l.boot, l.seq FROM ingest_log l JOIN keys k "
                                    "USING (node, boot, seq)").fetchall())

    def commit_frames(self, frames: list[wire.Frame]) -> Verdicts:
        """Store the new frames of a batch in one transaction; resends are recognised, not stored twice."""
        verdicts = self._classify(frames)
        if not verdicts.stored:
            return verdicts
        self.con.begin()
        try:
            self._insert(verdicts.stored)
            self.con.commit()
        except BaseException:
            self.con.rollback()
            raise
        for f in verdicts.stored:
            self._high[(f.node, f.boot)] = max(self._high.get((f.node, f.boot), 0), f.seq)
        return verdicts

    def _insert(self, frames: list[wire.Frame]) -> None:
        now = time.time()
        log = pa.table({"node": [f.node for f in frames], "boot": [f.boot for f in frames],  # noqa: F841
                        "seq": pa.array([f.seq for f in frames], pa.int64()),
                        "type": [f.type for f in frames], "ts": [f.ts for f in frames],
                        "received": pa.array(np.full(len(frames), now))})
        self.con.execute("INSERT INTO ingest_log SELECT * FROM log")
        by_type: dict[str, list[wire.Frame]] = {}
        for f in frames:
            by_type.setdefault(f.type, []).append(f)
        if "samples" in by_type:
            batch = samples_table(by_type["samples"])  # noqa: F841 (DuckDB reads it by name)
            self.con.execute("INSERT INTO samples SELECT * FROM batch")
        rows = {
            "bbv": [r for f in by_type.get("bbv", []) for r in _bbv_rows(f)],
            "tasks": [_task_row(f) for f in by_type.get("task", [])],
            "regions": [_region_row(f) for f in by_type.get("region", [])],
            "probe_results": [_probe_row(f) for f in by_type.get("probe_result", [])],
        }
        for table, values in rows.items():
            if values:
                self._insert_rows(table, values)
        if "hello" in by_type:
            self._upsert_nodes(by_type["hello"])
        # every stored frame says its node is alive (hello alone left a streaming agent looking silent)
        self.con.execute("UPDATE nodes SET last_seen = ? WHERE list_contains(?, node)",
                         [now, sorted({f.node for f in frames})])
        if "probe_result" in by_type:
            record_probe_facts(self.con)

    def _insert_rows(self, table: str, rows: list[tuple], on_conflict: str = "") -> None:
        columns = self._columns.get(table)
        if columns is None:
            columns = self._columns[table] = [c[0] for c in self.con.execute(f"DESCRIBE {table}").fetchall()]
        batch = pa.table(dict(zip(columns, map(list, zip(*rows)))))  # noqa: F841 (read by DuckDB)
        self.con.execute(f"INSERT INTO {table} SELECT * FROM batch {on_conflict}")

    def _upsert_nodes(self, hellos: list[wire.Frame]) -> None:
        """One statement for a batch's hellos (1,000 agents starting at once made 1,000 statements); a
        node's newest hello in the batch wins (one statement may not update a row twice), its first
        is when it was first seen."""
        newest, first = {}, {}
        for f in hellos:
            newest[f.node] = f
            first[f.node] = min(first.get(f.node, f.ts), f.ts)
        facts = [(f.node, f.body["hostname"], f.body.get("cpu_model"), f.body.get("cores"), f.body.get("memory_bytes"),
                  f.body["agent_version"], _json(f.body.get("counters")), _json(f.body.get("extra")), f.boot,
                  first[f.node], f.ts) for f in newest.values()]
        self._insert_rows("nodes", facts, """ON CONFLICT (node) DO UPDATE SET hostname=excluded.hostname,
            cpu_model=excluded.cpu_model, cores=excluded.cores, memory_bytes=excluded.memory_bytes,
            agent_version=excluded.agent_version, counters=excluded.counters, extra=excluded.extra,
            boot=excluded.boot, last_seen=excluded.last_seen""")

    def run(self, fn):
        """Run fn(con) in one transaction (analysis jobs write through here, on the writer thread)."""
        self.con.begin()
        try:
            result = fn(self.con)
            self.con.commit()
            return result
        except BaseException:
            self.con.rollback()
            raise


# ---- analysis writes: jobs hand these to the writer thread (ctx.write), inside its transaction ----

def insert_frame(con: duckdb.DuckDBPyConnection, table: str, rows) -> None:
    """Append rows (an Arrow table, or a DataFrame) whose columns are a subset of `table`'s, named alike."""
    con.register("analysis_batch", rows)
    try:
        columns = [d[0] for d in con.execute("SELECT * FROM analysis_batch LIMIT 0").description]
        con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM analysis_batch")
    finally:
        con.unregister("analysis_batch")


def insert_model(con: duckdb.DuckDBPyConnection, scope: str, window: tuple[float, float], n_rows: int,
                 learned_at: float, graph: dict, edges: pa.Table) -> int:
    """A new `models` version with its `edges` rows (without model_id); returns its id."""
    model_id = con.execute("SELECT coalesce(max(model_id), 0) + 1 FROM models").fetchone()[0]
    con.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?, ?)",
                [model_id, scope, window[0], window[1], n_rows, learned_at, json.dumps(graph)])
    if len(edges):
        insert_frame(con, "edges", edges.append_column("model_id", pa.array([model_id] * len(edges), pa.int64())))
    return model_id


def set_baseline(con: duckdb.DuckDBPyConnection, scope: str, model_id: int, how: str, now: float) -> None:
    """Make model `model_id` the baseline of `scope` (`how`: 'first stable' or 'pinned')."""
    con.execute("INSERT INTO baselines VALUES (?, ?, ?, ?) ON CONFLICT (scope) DO UPDATE SET "
                "model_id = excluded.model_id, chosen = excluded.chosen, how = excluded.how",
                [scope, model_id, now, how])


def raise_anomaly(con: duckdb.DuckDBPyConnection, row: dict) -> int:
    """A new open anomaly (row: scope, kind, src, dst, opened, baseline_id, model_id, score, threshold,
    evidence); returns its id."""
    anomaly_id = con.execute("SELECT coalesce(max(anomaly_id), 0) + 1 FROM anomalies").fetchone()[0]
    con.execute("INSERT INTO anomalies VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?)",
                [anomaly_id, row["scope"], row["kind"], row["src"], row["dst"], row["opened"], row["opened"],
                 row["baseline_id"], row["model_id"], row["score"], row["threshold"], json.dumps(row["evidence"])])
    return anomaly_id


def update_anomaly(con: duckdb.DuckDBPyConnection, anomaly_id: int, now: float, model_id: int | None,
                   score: float, threshold: float, evidence: dict) -> None:
    con.execute("UPDATE anomalies SET updated = ?, model_id = coalesce(?, model_id), score = ?, threshold = ?, "
                "evidence = ? WHERE anomaly_id = ?",
                [now, model_id, score, threshold, json.dumps(evidence), anomaly_id])


def resolve_anomaly(con: duckdb.DuckDBPyConnection, anomaly_id: int, now: float) -> None:
    con.execute("UPDATE anomalies SET resolved = ?, updated = ? WHERE anomaly_id = ?", [now, now, anomaly_id])


def record_anomalies(con: duckdb.DuckDBPyConnection, raised: list[dict], updated: list[tuple], resolved: list[int],
                     now: float) -> list[int]:
    """One evaluation's anomaly changes in one transaction: `raised` rows (raise_anomaly's), `updated`
    as update_anomaly's arguments after `now`, `resolved` ids. Returns the raised ones' ids in order."""
    for args in updated:
        update_anomaly(con, args[0], now, *args[1:])
    for anomaly_id in resolved:
        resolve_anomaly(con, anomaly_id, now)
    return [raise_anomaly(con, row) for row in raised]


def record_probe_facts(con: duckdb.DuckDBPyConnection) -> None:
    """Give each new probe result the facts of the hello its agent run sent (same node and boot):
    after that hello is stored, so a hello and a result in one batch work too."""
    con.execute(f"""UPDATE probe_results p SET facts = {NODE_FACTS_SQL} FROM nodes n
                    WHERE p.facts IS NULL AND p.node = n.node AND p.boot = n.boot""")


def register_kit(con: duckdb.DuckDBPyConnection, row: dict) -> None:
    """Insert or replace (app, kit) in probe_kits (row from probe.registry.kit_row)."""
    con.execute("DELETE FROM probe_kits WHERE app = ? AND kit = ?", [row["app"], row["kit"]])
    con.execute("INSERT INTO probe_kits VALUES (?, ?, ?, ?, ?)",
                [row["app"], row["kit"], row["path"], row["manifest"], row["registered"]])


def register_kit_file(db: str, row: dict) -> None:
    """Register a kit in the store file `db` of a stopped daemon (DuckDB allows one writing process)."""
    con = duckdb.connect(db)
    try:
        migrate(con)
        register_kit(con, row)
    finally:
        con.close()


# ---- retention (daemon/job_retention.py): roll-ups, exports and deletions, on the writer thread ----

RAW_TYPES = ("samples", "bbv")   # frame types whose rows retention deletes (tasks, regions stay)


def rollup_minutes(con: duckdb.DuckDBPyConnection, lo: float, hi: float, merge: bool = False) -> int:
    """Aggregate the raw samples with lo <= ts < hi (minute-aligned bounds) into `samples_minute`.

    merge=False replaces the aggregate of every (node, scope, metric, minute) that has raw rows there
    (its raw rows are all present); merge=True folds them into the stored aggregate instead (rows that
    arrived after their minute's raw rows were deleted). Returns the aggregates written."""
    con.execute("""CREATE OR REPLACE TEMP TABLE rollup_new AS
        SELECT node, scope, metric, floor(ts / 60) * 60 AS minute, count(value) AS count, avg(value) AS mean,
               min(value) AS min, max(value) AS max
        FROM samples WHERE ts >= ? AND ts < ? GROUP BY ALL""", [lo, hi])
    # Replacing: the stored aggregate takes no part (a join that never matches leaves its columns NULL).
    on = "USING (node, scope, metric, minute)" if merge else "ON FALSE"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE rollup_out AS
        SELECT n.node, n.scope, n.metric, n.minute, n.count + coalesce(o.count, 0) AS count,
               (coalesce(n.mean * n.count, 0) + coalesce(o.mean * o.count, 0))
                   / nullif(n.count + coalesce(o.count, 0), 0) AS mean,
               least(n.min, o.min) AS min, greatest(n.max, o.max) AS max
        FROM rollup_new n LEFT JOIN samples_minute o {on}""")
    con.execute("""DELETE FROM samples_minute s USING rollup_new n WHERE s.node = n.node AND s.scope = n.scope
                   AND s.metric = n.metric AND s.minute = n.minute""")
    con.execute("INSERT INTO samples_minute SELECT * FROM rollup_out")
    written = con.execute("SELECT count(*) FROM rollup_out").fetchone()[0]
    con.execute("DROP TABLE rollup_new")
    con.execute("DROP TABLE rollup_out")
    return written


# What each table's retention deletes: rows whose time column is below the cutoff.
RETAINED = {"samples": "ts", "bbv": "t_start", "samples_minute": "minute"}


def delete_before(con: duckdb.DuckDBPyConnection, table: str, cutoff: float, export: str | None = None) -> int:
    """Delete `table`'s rows older than `cutoff` (RETAINED names the column), first copying them to
    `export`/<table>-<cutoff>.parquet when a folder is given. Returns the rows deleted."""
    where = f"{RETAINED[table]} < ?"
    n = con.execute(f"SELECT count(*) FROM {table} WHERE {where}", [cutoff]).fetchone()[0]
    if n and export:
        path = f"{export.rstrip('/')}/{table}-{cutoff:.0f}.parquet".replace("'", "''")
        # COPY takes no bound parameters: the cutoff is a float formatted here, the folder the operator's
        con.execute(f"COPY (SELECT * FROM {table} WHERE {RETAINED[table]} < {cutoff!r}) TO '{path}' "
                    "(FORMAT parquet)")
    return con.execute(f"DELETE FROM {table} WHERE {where}", [cutoff]).fetchone()[0] if n else 0


def trim_ingest_log(con: duckdb.DuckDBPyConnection, cutoff: float) -> int:
    """Delete the log rows of raw frames (RAW_TYPES) received before `cutoff`, except the newest of each
    (node, boot): Store rebuilds its per-boot high-water mark from those at open (exactly-once)."""
    return con.execute(f"""DELETE FROM ingest_log WHERE type IN {RAW_TYPES} AND received < ?
        AND seq < (SELECT max(m.seq) FROM ingest_log m WHERE m.node = ingest_log.node AND m.boot = ingest_log.boot)
        """, [cutoff]).fetchone()[0]


def retain(con: duckdb.DuckDBPyConnection, lo: float | None, current: float, first: float | None, finalised: float,
           cut: dict[str, float], export: str | None, log_cut: float | None) -> dict[str, int]:
    """A retention run's writes (daemon/job_retention.py): roll up the minutes from `lo` to `current`;
    give the minutes about to lose their raw samples (from `first` to cut["samples"]) their final
    aggregate, merged into it before `finalised`; delete each table's rows before its cut (copied to
    Parquet in `export` first) and the ingest log before `log_cut`. Returns rows deleted per table."""
    if lo is not None and lo < current:
        rollup_minutes(con, lo, current)
    raw_cut = cut.get("samples")
    if raw_cut is not None and first is not None and first < raw_cut:
        merged_to = min(finalised, raw_cut)
        if first < merged_to:
            rollup_minutes(con, first, merged_to, merge=True)
        rollup_minutes(con, max(first, merged_to), raw_cut)
    deleted = {t: delete_before(con, t, c, export) for t, c in cut.items()}
    if log_cut is not None:
        deleted["ingest_log"] = trim_ingest_log(con, log_cut)
    return deleted

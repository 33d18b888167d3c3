"""The ingest writer: a Store owns one DuckDB file, migrated at open, and commits the wire frames of
a batch exactly once, each frame type turned into its table's rows.

Only the daemon's writer thread calls `commit_frames` and `run`; readers in the same process take
`cursor()`s. Exactly-once: (node, boot, seq) is in ingest_log once, in the same transaction as the
frame's rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from causewatch import wire
from causewatch.daemon.store.results import record_probe_facts
from causewatch.daemon.store.schema import migrate


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

"""The ingest writer: a Store owns one DuckDB file, migrated and its views made at open, and commits
the wire frames of a batch exactly once, each frame type turned into its base tables' rows.

Only the daemon's writer thread calls `commit_frames` and `run`; readers in the same process take
`cursor()`s. Exactly-once: (node, boot, seq) is in ingest_log once, in the same transaction as the
frame's rows and the dictionary rows (`series`) they are the first to use.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa

from causewatch import wire
from causewatch.daemon.store import columns
from causewatch.daemon.store.lake import folder_for, publish, sweep
from causewatch.daemon.store.results import record_probe_facts
from causewatch.daemon.store.schema import migrate
from causewatch.daemon.store.units import UPSERT, unit_rows
from causewatch.daemon.store.views import create_views

# Cached series-id columns (samples_batch) at most: past it the cache starts again (names that vary
# frame after frame must not grow the writer's memory; the series map itself grows with the series).
ID_COLUMNS_MAX = 1 << 16
# samples_batch joins the value blocks of groups smaller than this many values and transposes them in one
# call; larger blocks are copied from their own buffers, as a join's extra pass over cold bytes then costs
# more than a call per frame (100 x 100 frames: 15.5 CPU-ns a value joined, 10.3 frame by frame).
JOIN_BELOW = 1024
log = logging.getLogger(__name__)
# The nodes' last_seen are written together at most this often (seconds; a hello's at once): an UPDATE
# costs milliseconds however few rows it changes, a large share of a small frame's cost at 1,000 agents
# (docs/perf-log.md, "The nodes' last_seen").
LAST_SEEN_EVERY = 5.0


def _json(value) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


class Ids:
    """A dictionary table kept in memory by the writer: words (e.g. node, scope, metric) -> integer id,
    a new id on first sight. Ids given while a transaction is open are its `new` rows, inserted in it;
    `commit` keeps them, `rollback` forgets them, so the map never holds an id the table does not."""

    def __init__(self, rows):
        self.ids: dict[tuple, int] = {tuple(words): i for i, *words in rows}
        self.next = max(self.ids.values(), default=0) + 1
        self.new: list[tuple] = []

    def get(self, words: tuple) -> int:
        i = self.ids.get(words)
        if i is None:
            i = self.ids[words] = self.next
            self.next += 1
            self.new.append(words)
        return i

    def new_rows(self) -> list[tuple]:
        """(id, *words) of the ids given since the last commit or rollback."""
        first = self.next - len(self.new)
        return [(first + k, *words) for k, words in enumerate(self.new)]

    def commit(self) -> None:
        self.new.clear()

    def rollback(self) -> None:
        for words in self.new:
            del self.ids[words]
        self.next -= len(self.new)
        self.new.clear()


def ms(t: np.ndarray) -> np.ndarray:
    """Unix seconds as integer milliseconds, to the nearest (migration 6 rounds the same way); the
    wire keeps |t| < wire.MAX_TIME, so every result is exact."""
    return np.floor(t * 1000 + 0.5).astype(np.int64)


def _lay_out(members: list[tuple], width: int, rows: int, series, ts, value, mask) -> None:
    """Fill the columns' slices with g groups (series ids, frame bodies) of one shape, each as its width
    series of `rows` values in time order: the g x rows x width stack of their blocks as g x width x rows."""
    bodies = [b for _, group in members for b in group]
    g = len(members)
    t = np.frombuffer(b"".join(b["t"] for b in bodies), "<f8").reshape(g, 1, rows)
    if t.size and not np.abs(t).max() < wire.MAX_TIME:   # wire.decode refuses these already
        raise ValueError(f"a sample time beyond +-{wire.MAX_TIME:.0f} s cannot be stored as integer ms")
    ts.reshape(g, width, rows)[:] = ms(t)
    series.reshape(g, width, rows)[:] = np.stack([ids for ids, _ in members])[:, :, None]
    out = value.reshape(g, width, rows)
    if width * rows < JOIN_BELOW:
        out[:] = np.frombuffer(b"".join(b["values"] for b in bodies), "<f8").reshape(g, rows, width).transpose(0, 2, 1)
    else:
        for block, (_, group) in zip(out, members):
            row = 0
            for b in group:
                v = np.frombuffer(b["values"], "<f8").reshape(-1, width)
                block[:, row:row + len(v)] = v.T
                row += len(v)
    if mask is not None:
        nulls = b"".join(b.get("nulls") or bytes(len(b["values"]) >> 3) for b in bodies)
        mask.reshape(g, width, rows)[:] = np.frombuffer(nulls, np.uint8).reshape(g, rows, width).transpose(0, 2, 1) != 0


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
    # a failed probe's row has its error and no prediction
    return (f.node, f.boot, f.seq, f.ts, b["app"], b["kit"], b.get("predicted_seconds"), b.get("lo"), b.get("hi"),
            b.get("ratio"), b.get("probe_seconds"), _json(b.get("phases")), _json(b.get("extra")), None,
            b.get("error"))


@dataclass
class Verdicts:
    """What a batch commit decided per frame: stored (new) or duplicate (already stored)."""
    stored: list[wire.Frame] = field(default_factory=list)
    duplicate: list[wire.Frame] = field(default_factory=list)


class Store:
    """Owns one DuckDB file: migrations at open, exactly-once batch commits, reader cursors."""

    def __init__(self, path: str, memory_bytes: int | None = None, lake: str = "", shard: str = ""):
        self.path, self.lake = path, folder_for(path, lake, shard)
        self.con = duckdb.connect(path, config={"memory_limit": f"{memory_bytes}B"} if memory_bytes else {})
        try:
            self.version = migrate(self.con)
            self._open_lake()
        except BaseException:
            # A refused migration must not hold the file: the operator opens it next to see why.
            self.con.close()
            raise
        self._columns: dict[str, list[tuple[str, str]]] = {}   # table -> (column, DuckDB type)
        self.series = Ids(self.con.execute("SELECT series_id, node, scope, metric FROM series").fetchall())
        self.bbv_keys = Ids(self.con.execute("SELECT key_id, target, key FROM bbv_keys").fetchall())
        # (node, scope, names) -> the series id of each name: agents send the same names frame after frame
        self._id_columns: dict[tuple, np.ndarray] = {}
        self._unwritten: dict[str, float] = {}   # node -> when a frame of it was last stored, not yet in nodes
        self._seen_written = 0.0                 # when the last_seen were last written
        self._seen_next: tuple[dict, float] = ({}, 0.0)   # the two above once the open transaction commits
        # Highest stored seq per (node, boot): a frame above it is new without a look-up; at or below it,
        # ingest_log decides (frames may arrive out of order: that is no reason to drop one).
        self._high = {(n, b): s for n, b, s in self.con.execute(
            "SELECT node, boot, max(seq) FROM ingest_log GROUP BY ALL").fetchall()}

    def _open_lake(self) -> None:
        # Files a crashed move left unlisted go; listed ones that are gone are named (their rows are lost)
        # and left out of the view, so every other reader still works.
        missing = sweep(self.con, self.lake)["missing"]
        if missing:
            log.error("%s: lake files listed but missing, their rows are lost: %s", self.path, ", ".join(missing))
        create_views(self.con, self.lake)
        publish(self.con, self.lake)

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
        """Which of these frames' (node, boot, seq) are already stored: in ingest_log, or at or below
        their boot's trim watermark (retention trimmed their log rows). One query, not one a frame."""
        keys = columns.table({"node": columns.texts([f.node for f in frames]),
                              "boot": columns.texts([f.boot for f in frames]),
                              "seq": columns.optional([f.seq for f in frames], np.int64)})
        with columns.registered(self.con, "keys", keys):
            return set(self.con.execute("""SELECT k.node, k.boot, k.seq FROM keys k
                WHERE EXISTS (SELECT 1 FROM ingest_log l WHERE l.node = k.node AND l.boot = k.boot AND l.seq = k.seq)
                   OR k.seq <= (SELECT t.seq FROM ingest_trimmed t WHERE t.node = k.node AND t.boot = k.boot)
                """).fetchall())

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
            self._forget_new_ids()
            self.con.rollback()
            raise
        self.series.commit()
        self.bbv_keys.commit()
        self._unwritten, self._seen_written = self._seen_next
        for f in verdicts.stored:
            self._high[(f.node, f.boot)] = max(self._high.get((f.node, f.boot), 0), f.seq)
        return verdicts

    def _insert(self, frames: list[wire.Frame]) -> None:
        now = time.time()
        log_rows = columns.table({
            "node": columns.texts([f.node for f in frames]), "boot": columns.texts([f.boot for f in frames]),
            "seq": columns.optional([f.seq for f in frames], np.int64),
            "type": columns.texts([f.type for f in frames]), "ts": columns.optional([f.ts for f in frames], np.float64),
            "received": columns.numbers(np.full(len(frames), now))})
        self.con.from_arrow(log_rows).insert_into("ingest_log")
        by_type: dict[str, list[wire.Frame]] = {}
        for f in frames:
            by_type.setdefault(f.type, []).append(f)
        if "samples" in by_type:
            batch = self.samples_batch(by_type["samples"])
            if self.series.new:
                self._insert_rows("series", self.series.new_rows())
            self.con.from_arrow(batch).insert_into("samples_hot")
        if "bbv" in by_type:
            self._insert_bbv(by_type["bbv"])
        rows = {
            "tasks": [_task_row(f) for f in by_type.get("task", [])],
            "regions": [_region_row(f) for f in by_type.get("region", [])],
            "probe_results": [_probe_row(f) for f in by_type.get("probe_result", [])],
        }
        for table, values in rows.items():
            if values:
                self._insert_rows(table, values)
        if "unit" in by_type:
            self._insert_rows("units", unit_rows(by_type["unit"], now), UPSERT)
        if "hello" in by_type:
            self._upsert_nodes(by_type["hello"])
        # every stored frame says its node is alive (hello alone left a streaming agent looking silent), to
        # within LAST_SEEN_EVERY: all nodes seen since the last write are written in one statement
        seen = {**self._unwritten, **dict.fromkeys((f.node for f in frames), now)}
        if "hello" in by_type or now - self._seen_written >= LAST_SEEN_EVERY:
            last = columns.table({"node": columns.texts(list(seen)),
                                  "t": columns.numbers(np.fromiter(seen.values(), float, len(seen)))})
            with columns.registered(self.con, "last", last):
                self.con.execute("UPDATE nodes SET last_seen = last.t FROM last WHERE nodes.node = last.node")
            self._seen_next = ({}, now)
        else:
            self._seen_next = (seen, self._seen_written)
        if "probe_result" in by_type:
            record_probe_facts(self.con)

    def samples_batch(self, frames: list[wire.Frame]) -> pa.Table:
        """The frames' values as one single-chunk Arrow table of samples_hot's columns (series_id, ts in
        ms, value): DuckDB inserts one long chunk faster than a chunk per frame. The rows go series by
        series: the frames of one (node, scope, names) are stacked and their T x M block laid out by
        column, so each series' values of the batch sit together in time order: DuckDB's RLE and ALP
        then keep recorded agent output in far fewer bytes than the frames' row-major order
        (docs/storage.md; docs/perf-log.md, "The nodes' last_seen"). Frames are grouped, values never
        sorted; new series get their ids here, in the order the batch first names them."""
        groups: dict[tuple, tuple[np.ndarray, list[dict]]] = {}
        for f in frames:
            key = (f.node, f.body["scope"], tuple(f.body["names"]))
            group = groups.get(key)
            if group is None:
                group = groups[key] = (self._series_ids(*key), [])
            group[1].append(f.body)
        # Groups of one shape (width, each frame's row count) are laid out together, a few numpy calls
        # for all of them: calls per group had cost 14 us a frame, most of a 5 x 50 frame's batch work.
        shapes: dict[tuple, list[tuple]] = {}
        for ids, bodies in groups.values():
            shapes.setdefault((len(ids), *(len(b["t"]) >> 3 for b in bodies)), []).append((ids, bodies))
        total = sum(len(f.body["values"]) for f in frames) >> 3
        series, ts, value = np.empty(total, np.int32), np.empty(total, np.int64), np.empty(total)
        mask = np.zeros(total, bool) if any("nulls" in f.body for f in frames) else None
        start = 0
        for (width, *rows), members in shapes.items():
            end = start + len(members) * width * sum(rows)
            _lay_out(members, width, sum(rows), series[start:end], ts[start:end], value[start:end],
                     None if mask is None else mask[start:end])
            start = end
        return columns.table({"series_id": columns.numbers(series), "ts": columns.numbers(ts),
                              "value": columns.numbers(value, None if mask is None else ~mask)})

    def _series_ids(self, node: str, scope: str, names: tuple[str, ...]) -> np.ndarray:
        key = (node, scope, names)
        ids = self._id_columns.get(key)
        if ids is None:
            if len(self._id_columns) >= ID_COLUMNS_MAX:
                self._id_columns.clear()
            get = self.series.get
            ids = self._id_columns[key] = np.array([get((node, scope, n)) for n in names], np.int32)
        return ids

    def _insert_bbv(self, frames: list[wire.Frame]) -> None:
        """Each vector as one bbv_vectors row (its id from the sequence, which outlives rows moved out of
        DuckDB) and its (key id, count) pairs; keys new to their target go into bbv_keys first."""
        ids = [r[0] for r in self.con.execute("SELECT nextval('bbv_vector_ids') FROM range(?)",
                                              [len(frames)]).fetchall()]
        bodies = [f.body for f in frames]
        vectors = columns.table({
            "vector_id": columns.numbers(np.array(ids, np.int64)), "node": columns.texts([f.node for f in frames]),
            "boot": columns.texts([f.boot for f in frames]), "seq": columns.optional([f.seq for f in frames], np.int64),
            "target": columns.texts([b["target"] for b in bodies]), "kind": columns.texts([b["kind"] for b in bodies]),
            "t_start": columns.optional([b["start"] for b in bodies], np.float64),
            "t_end": columns.optional([b["end"] for b in bodies], np.float64),
            "pid": columns.optional([b.get("pid") for b in bodies], np.int64),
            "lost": columns.optional([b.get("lost") for b in bodies], np.int64)})
        get = self.bbv_keys.get
        key_ids = [get((b["target"], k)) for b in bodies for k in b["vector"]["keys"]]
        counts = columns.table({
            "vector_id": columns.numbers(np.repeat(np.array(ids, np.int64),
                                                   [len(b["vector"]["keys"]) for b in bodies])),
            "key_id": columns.numbers(np.array(key_ids, np.int32)),
            "count": columns.optional([c for b in bodies for c in b["vector"]["counts"]], np.int64)})
        if self.bbv_keys.new:
            self._insert_rows("bbv_keys", self.bbv_keys.new_rows())
        self.con.from_arrow(vectors).insert_into("bbv_vectors")
        self.con.from_arrow(counts).insert_into("bbv_counts")

    def _forget_new_ids(self) -> None:
        """After a rollback: the ids given in it are gone from the tables, so from the maps too."""
        if self.series.new:
            self.series.rollback()
            self._id_columns.clear()   # some columns hold the forgotten ids
        self.bbv_keys.rollback()

    def _insert_rows(self, table: str, rows: list[tuple], on_conflict: str = "") -> None:
        described = self._columns.get(table)
        if described is None:
            described = self._columns[table] = [c[:2] for c in self.con.execute(f"DESCRIBE {table}").fetchall()]
        batch = columns.table({name: columns.column(kind, list(values))
                               for (name, kind), values in zip(described, zip(*rows))})
        with columns.registered(self.con, "batch", batch):
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
                  first[f.node], f.ts, _json(f.body.get("collectors"))) for f in newest.values()]
        self._insert_rows("nodes", facts, """ON CONFLICT (node) DO UPDATE SET hostname=excluded.hostname,
            cpu_model=excluded.cpu_model, cores=excluded.cores, memory_bytes=excluded.memory_bytes,
            agent_version=excluded.agent_version, counters=excluded.counters, extra=excluded.extra,
            boot=excluded.boot, last_seen=excluded.last_seen, collectors=excluded.collectors""")

    def run(self, fn):
        """Run fn(con) in one transaction (analysis jobs write through here, on the writer thread)."""
        self.con.begin()
        try:
            result = fn(self.con)
            self.con.commit()
            return result
        except BaseException:
            self._forget_new_ids()
            self.con.rollback()
            raise

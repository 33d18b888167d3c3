"""The ingest writer: exactly-once commits, resends recognised, late frames stored, nodes upserted."""

import subprocess
import sys

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from causewatch import wire
from causewatch.daemon.store import Store, columns
from causewatch.daemon.store.frames import LAST_SEEN_EVERY
from causewatch.errors import WireError


def frames(seqs, node="n1", boot="b1"):
    return [wire.decode(wire.encode("samples", node, boot, s, wire.samples_body([float(s)], ["m"], [[s * 1.0]])))
            for s in seqs]


def test_resend_is_stored_once_and_late_frames_are_stored(tmp_path):
    """A frame arriving after a higher seq (4 after 5) was refused and lost."""
    store = Store(str(tmp_path / "s.duckdb"))
    first = store.commit_frames(frames([1, 3, 2, 5]))
    assert [f.seq for f in first.stored] == [1, 3, 2, 5]
    again = store.commit_frames(frames([2, 3, 4, 6, 6]))
    assert [f.seq for f in again.stored] == [4, 6]
    assert [f.seq for f in again.duplicate] == [2, 3, 6]
    rows = store.cursor().execute("SELECT ts FROM samples ORDER BY ts").fetchall()
    assert [r[0] for r in rows] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    store.close()


def test_high_water_marks_survive_reopen(tmp_path):
    db = str(tmp_path / "s.duckdb")
    store = Store(db)
    store.commit_frames(frames([1, 2]))
    store.close()
    store = Store(db)
    v = store.commit_frames(frames([2, 3]))
    assert ([f.seq for f in v.duplicate], [f.seq for f in v.stored]) == ([2], [3])
    store.close()


def test_null_values_are_stored_as_null(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    body = wire.samples_body([1.0, 2.0], ["a", "b"], np.array([[1.0, np.nan], [np.nan, 4.0]]))
    store.commit_frames([wire.decode(wire.encode("samples", "n", "b", 1, body))])
    rows = store.cursor().execute("SELECT ts, metric, value FROM samples ORDER BY ts, metric").fetchall()
    assert rows == [(1.0, "a", 1.0), (1.0, "b", None), (2.0, "a", None), (2.0, "b", 4.0)]
    store.close()


@pytest.mark.parametrize("rows", [3, 400])   # groups below and above frames.JOIN_BELOW values
def test_a_batch_is_stored_series_by_series_in_time_order(tmp_path, rows):
    """Rows go series by series (the frames of one node, scope and names stacked, laid out by
    column), so DuckDB compresses each series' run; every value, null and time kept. Frames in arrival
    order interleave two nodes, one name list changes, a null-free frame joins one with nulls, and
    frames of one group differ in length (groups of several shapes in one batch)."""
    rng = np.random.default_rng(5)
    sent, batch = {}, []
    for seq in range(1, 7):
        for node in ("n1", "n2"):
            names = ["a", "b", "c"] if seq != 4 else ["a", "c"]
            t = 1000.0 * seq + np.arange(rows + (seq == 5 and node == "n2"))
            v = rng.random((len(t), len(names)))
            if node == "n1" and seq % 2:
                v[1, 0] = np.nan
            batch.append(wire.decode(wire.encode("samples", node, "b", seq, wire.samples_body(t, names, v))))
            sent.update({(node, n, ti): (None if np.isnan(x) else x) for row, ti in zip(v, t)
                         for n, x in zip(names, row)})
    store = Store(str(tmp_path / "s.duckdb"))
    store.commit_frames(batch)
    con = store.cursor()
    stored = con.execute("SELECT node, metric, ts, value FROM samples").fetchall()
    assert {(n, m, t): v for n, m, t, v in stored} == sent and len(stored) == len(sent)
    order = con.execute("SELECT series_id, ts FROM samples_hot").fetchall()   # the table's own order
    runs = [s for i, (s, _) in enumerate(order) if i == 0 or order[i - 1][0] != s]
    by_names = 2 * 3 + 2 * 2   # (n1, n2) x (a, b, c) in the groups of three names, x (a, c) in those of two
    assert len(runs) == by_names, runs
    assert all(t0 < t1 for (s0, t0), (s1, t1) in zip(order, order[1:]) if s0 == s1)
    store.close()


def test_failed_transaction_leaves_nothing(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    try:
        store.run(lambda con: (con.execute("INSERT INTO anomalies (ts, scope) VALUES (1, 's')"),
                               con.execute("SELECT * FROM no_such_table")))
    except duckdb.Error:
        pass
    assert store.cursor().execute("SELECT count(*) FROM anomalies").fetchone()[0] == 0
    store.close()


def test_every_stored_frame_updates_its_nodes_last_seen(tmp_path, monkeypatch):
    store = Store(str(tmp_path / "s.duckdb"))
    now = [100.0]
    monkeypatch.setattr("causewatch.daemon.store.frames.time.time", lambda: now[0])
    hello = wire.decode(wire.encode("hello", "n1", "b1", 1, {"hostname": "h", "agent_version": "t"}, ts=1.0))
    store.commit_frames([hello])
    now[0] = 250.0
    store.commit_frames(frames([2]))
    first, last = store.con.execute("SELECT first_seen, last_seen FROM nodes WHERE node = 'n1'").fetchone()
    assert first == 1.0 and last == 250.0   # a streaming agent is seen by its samples, not only its hello
    now[0] = 252.0   # within LAST_SEEN_EVERY of the last write: held, then written with its own time
    store.commit_frames(frames([3]))
    assert store.con.execute("SELECT last_seen FROM nodes WHERE node = 'n1'").fetchone()[0] == 250.0
    now[0] = 250.0 + LAST_SEEN_EVERY
    store.commit_frames([wire.decode(wire.encode("task", "n2", "b", 1, {"app": "a", "task_id": "t", "start": 1.0,
                                                                         "duration": 1.0}))])
    assert store.con.execute("SELECT last_seen FROM nodes WHERE node = 'n1'").fetchone()[0] == 252.0
    store.close()


def test_one_commit_of_many_nodes_scopes_names_and_nulls_stores_each_value_once(tmp_path):
    """The commit's single Arrow table: every frame's values under its own node, scope, metric and ts."""
    store = Store(str(tmp_path / "s.duckdb"))
    rng = np.random.default_rng(3)
    bodies = []
    for k in range(6):
        names = [f"m{j}" for j in range(k % 3, k % 3 + 2 + k % 2)]
        values = rng.random((k + 1, len(names)))
        values[0, -1] = np.nan if k % 2 else values[0, -1]
        bodies.append((f"n{k % 3}", wire.samples_body(np.arange(k + 1) + 10.0 * k, names, values, f"s{k % 2}")))
    store.commit_frames([wire.decode(wire.encode("samples", node, "b", k + 1, b))
                         for k, (node, b) in enumerate(bodies)])
    expected = sorted((node, float(t), b["scope"], name, None if np.isnan(v) else float(v))
                      for node, b in bodies for t, row in zip(*wire.samples_arrays(b)[::2]) for name, v in
                      zip(b["names"], row))
    got = store.cursor().execute("SELECT node, ts, scope, metric, value FROM samples ORDER BY ALL").fetchall()
    assert got == sorted(expected, key=lambda r: (r[0], r[1], r[2], r[3], r[4] is None, r[4] or 0))
    store.close()


def test_hellos_of_one_batch_are_upserted_newest_wins_first_seen_kept(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))

    def hello(node, seq, host, ts):
        return wire.decode(wire.encode("hello", node, "b1", seq, {"hostname": host, "agent_version": "t", "cores": 2},
                                       ts=ts))
    store.commit_frames([hello("n1", 1, "old", 1.0), hello("n2", 1, "h2", 2.0), hello("n1", 2, "new", 3.0)])
    store.commit_frames([hello("n2", 2, "h2b", 5.0)])
    rows = store.cursor().execute("SELECT node, hostname, cores, first_seen FROM nodes ORDER BY node").fetchall()
    assert rows == [("n1", "new", 2, 1.0), ("n2", "h2b", 2, 2.0)]
    store.close()


def test_duckdb_memory_is_bounded_by_the_setting(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"), memory_bytes=64 * 2**20)
    assert store.cursor().execute("SELECT current_setting('memory_limit')").fetchone()[0] == "64.0 MiB"
    store.close()


# ---- series ids: filled on first sight, in the frame's own transaction -------------------------------

def samples_frame(node: str, seq: int, names, t=(1.0,), scope="node", boot="b1", values=None) -> wire.Frame:
    values = np.full((len(t), len(names)), float(seq)) if values is None else values
    return wire.decode(wire.encode("samples", node, boot, seq, wire.samples_body(list(t), list(names), values, scope)))


def series_rows(store: Store) -> dict[tuple, int]:
    rows = store.cursor().execute("SELECT series_id, node, scope, metric FROM series").fetchall()
    return {(n, s, m): i for i, n, s, m in rows}


def test_series_are_given_ids_on_first_sight_once_each_and_kept_across_reopen(tmp_path):
    db = str(tmp_path / "s.duckdb")
    store = Store(db)
    # one batch: a new series in two frames of one node, in another scope and node, and a frame twice
    batch = [samples_frame("n1", 1, ["a", "b"]), samples_frame("n1", 2, ["b", "c"]),
             samples_frame("n1", 3, ["a"], scope="other"), samples_frame("n2", 1, ["a"]),
             samples_frame("n1", 2, ["b", "c"])]
    v = store.commit_frames(batch)
    assert len(v.stored) == 4 and len(v.duplicate) == 1
    ids = series_rows(store)
    assert sorted(ids) == [("n1", "node", "a"), ("n1", "node", "b"), ("n1", "node", "c"), ("n1", "other", "a"),
                           ("n2", "node", "a")]
    assert sorted(ids.values()) == [1, 2, 3, 4, 5] and store.series.ids == ids
    store.close()
    store = Store(db)
    assert store.series.ids == ids
    store.commit_frames([samples_frame("n2", 2, ["a", "z"])])
    assert series_rows(store) == {**ids, ("n2", "node", "z"): 6}
    got = store.cursor().execute("SELECT node, scope, metric, value FROM samples ORDER BY ALL").fetchall()
    assert got == [("n1", "node", "a", 1.0), ("n1", "node", "b", 1.0), ("n1", "node", "b", 2.0),
                   ("n1", "node", "c", 2.0), ("n1", "other", "a", 3.0), ("n2", "node", "a", 1.0),
                   ("n2", "node", "a", 2.0), ("n2", "node", "z", 2.0)]
    store.close()


def unstorable_bbv(seq: int) -> wire.Frame:
    """A frame the wire accepts and DuckDB cannot hold: a count past BIGINT (msgpack carries uint64)."""
    body = {"target": "app", "kind": "native", "start": 0.0, "end": 1.0,
            "vector": {"keys": ["f"], "counts": [2**64 - 1]}}
    return wire.decode(wire.encode("bbv", "n1", "b1", seq, body))


def test_a_rolled_back_commit_takes_its_new_series_ids_with_it(tmp_path):
    """The series rows and the writer's map move together: after a failed batch neither holds the
    ids it gave, and the same frames stored afterwards get ids the table agrees with."""
    store = Store(str(tmp_path / "s.duckdb"))
    store.commit_frames([samples_frame("n1", 1, ["a"])])
    before_map, before_rows = dict(store.series.ids), series_rows(store)
    new = [samples_frame("n1", 2, ["a", "fresh"]), samples_frame("n9", 1, ["a"])]
    with pytest.raises((duckdb.Error, OverflowError, pa.ArrowException)):
        store.commit_frames([*new, unstorable_bbv(3)])
    assert store.series.ids == before_map and series_rows(store) == before_rows
    assert store.series.new == [] and store.series.next == 2
    assert store.cursor().execute("SELECT count(*) FROM samples").fetchone()[0] == 1
    # the writer's cached id columns forgot the ids too: the same frames now get fresh, consistent ids
    store.commit_frames([samples_frame("n7", 1, ["fresh"]), *new])
    assert store.series.ids == series_rows(store)
    assert series_rows(store) == {("n1", "node", "a"): 1, ("n7", "node", "fresh"): 2, ("n1", "node", "fresh"): 3,
                                  ("n9", "node", "a"): 4}
    got = store.cursor().execute("SELECT node, metric, value FROM samples ORDER BY ALL").fetchall()
    assert got == [("n1", "a", 1.0), ("n1", "a", 2.0), ("n1", "fresh", 2.0), ("n7", "fresh", 1.0), ("n9", "a", 1.0)]
    store.close()


def test_a_failed_run_leaves_the_series_map_alone(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    store.commit_frames([samples_frame("n1", 1, ["a"])])
    with pytest.raises(duckdb.Error):
        store.run(lambda con: con.execute("SELECT * FROM no_such_table"))
    store.commit_frames([samples_frame("n1", 2, ["a", "b"])])
    assert store.series.ids == series_rows(store) == {("n1", "node", "a"): 1, ("n1", "node", "b"): 2}
    store.close()


def test_hostile_samples_empty_frames_nulls_and_times_at_the_limits(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    edge = wire.MAX_TIME - 0.001
    frames = [
        samples_frame("n1", 1, [], t=[]),                        # no timestamps, no names
        samples_frame("n1", 2, ["a"], t=[]),                     # names, no timestamps
        samples_frame("n1", 3, [], t=[5.0]),                     # a timestamp, no names
        samples_frame("n1", 4, ["a", "b"], t=[-edge, edge, 1.2345678],
                      values=np.array([[np.nan, 1.0], [2.0, np.nan], [np.nan, np.nan]])),
    ]
    assert len(store.commit_frames(frames).stored) == 4
    got = store.cursor().execute("SELECT ts, metric, value FROM samples ORDER BY ts, metric").fetchall()
    assert [r[1:] for r in got] == [("a", None), ("b", 1.0), ("a", None), ("b", None), ("a", 2.0), ("b", None)]
    # out there a double of seconds is 2 ms coarse: the time comes back within a millisecond
    assert [r[0] for r in got] == pytest.approx([-edge, -edge, 1.235, 1.235, edge, edge], abs=0.001, rel=0)
    assert store.cursor().execute("SELECT count(*) FROM series").fetchone()[0] == 2
    store.close()


@pytest.mark.parametrize("t", [wire.MAX_TIME, -wire.MAX_TIME, 1e300, -1e300])
def test_a_time_the_store_cannot_hold_is_refused_by_the_wire(t):
    data = wire.encode("samples", "n1", "b1", 1, wire.samples_body([1.0, t], ["a"], [[1.0], [2.0]]))
    with pytest.raises(WireError) as e:
        wire.decode(data)
    assert (e.value.field, e.value.code, e.value.seq) == ("body.t", "range", 1)


def test_a_frame_made_without_the_wire_and_a_time_it_cannot_hold_stores_nothing(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    bad = wire.Frame("samples", "n1", "b1", 1, 1.0, wire.samples_body([1.0, 1e300], ["a"], [[1.0], [2.0]]))
    with pytest.raises(ValueError, match="cannot be stored as integer ms"):
        store.commit_frames([samples_frame("n1", 2, ["b"]), bad])
    assert store.cursor().execute("SELECT count(*) FROM samples_hot").fetchone()[0] == 0
    assert store.series.ids == {} == series_rows(store)
    store.close()


def test_unflagged_nan_is_refused_and_a_flagged_one_stored_as_null(tmp_path):
    body = wire.samples_body([1.0], ["a", "b"], [[1.0, 2.0]])
    values = bytearray(body["values"])
    values[8:16] = np.array([np.nan]).tobytes()
    with pytest.raises(WireError) as e:
        wire.decode(wire.encode("samples", "n1", "b1", 1, {**body, "values": bytes(values)}))
    assert e.value.code == "nonfinite"
    store = Store(str(tmp_path / "s.duckdb"))
    flagged = {**body, "values": bytes(values), "nulls": b"\x00\x01"}
    store.commit_frames([wire.decode(wire.encode("samples", "n1", "b1", 1, flagged))])
    assert store.cursor().execute("SELECT metric, value FROM samples ORDER BY metric").fetchall() == \
        [("a", 1.0), ("b", None)]
    store.close()


def test_times_are_kept_to_the_nearest_millisecond(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    t = [1.7e9 + 0.0004, 1.7e9 + 0.0006, 1776000000.123, 0.001]
    store.commit_frames([samples_frame("n1", 1, ["a"], t=t)])
    got = [r[0] for r in store.cursor().execute("SELECT ts FROM samples ORDER BY ts").fetchall()]
    assert got == [0.001, 1.7e9, 1.7e9 + 0.001, 1776000000.123]
    assert store.cursor().execute("SELECT ts FROM samples_hot ORDER BY ts").fetchall()[-1] == (1776000000123,)
    store.close()


# ---- phase vectors: a row per vector, its counts by key id, a key dictionary per target ----------------

def bbv_frame(node: str, seq: int, target: str, keys, counts=None, boot="b1", **extra) -> wire.Frame:
    counts = list(range(1, len(keys) + 1)) if counts is None else counts
    body = {"target": target, "kind": "native", "start": float(seq), "end": seq + 1.0,
            "vector": {"keys": list(keys), "counts": counts}, **extra}
    return wire.decode(wire.encode("bbv", node, boot, seq, body))


def key_rows(store: Store) -> dict[tuple, int]:
    return {(t, k): i for i, t, k in store.cursor().execute("SELECT key_id, target, key FROM bbv_keys").fetchall()}


def bbv_view(store: Store) -> list[tuple]:
    return store.cursor().execute("SELECT node, seq, target, key, count, pid, lost FROM bbv ORDER BY ALL").fetchall()


def test_phase_vector_keys_get_ids_per_target_on_first_sight(tmp_path):
    db = str(tmp_path / "s.duckdb")
    store = Store(db)
    batch = [bbv_frame("n1", 1, "app", ["f", "g"], pid=7, lost=2), bbv_frame("n2", 1, "app", ["g", "h"]),
             bbv_frame("n1", 2, "other", ["f"]),                   # the same key, another target: its own id
             bbv_frame("n1", 3, "app", []),                        # an empty vector: a vector row, no counts
             bbv_frame("n1", 4, "app", ["f", "f"], [1, 5]),        # a key twice in one vector: both rows kept
             bbv_frame("n1", 1, "app", ["f", "g"], pid=7, lost=2)]  # a resend in the same batch
    v = store.commit_frames(batch)
    assert len(v.stored) == 5 and len(v.duplicate) == 1
    keys = key_rows(store)
    assert keys == {("app", "f"): 1, ("app", "g"): 2, ("app", "h"): 3, ("other", "f"): 4} == store.bbv_keys.ids
    assert bbv_view(store) == [("n1", 1, "app", "f", 1, 7, 2), ("n1", 1, "app", "g", 2, 7, 2),
                               ("n1", 2, "other", "f", 1, None, None), ("n1", 4, "app", "f", 1, None, None),
                               ("n1", 4, "app", "f", 5, None, None), ("n2", 1, "app", "g", 1, None, None),
                               ("n2", 1, "app", "h", 2, None, None)]
    vectors = store.cursor().execute("SELECT count(*), count(DISTINCT vector_id) FROM bbv_vectors").fetchone()
    assert vectors == (5, 5)
    store.close()
    store = Store(db)
    assert store.bbv_keys.ids == keys
    store.commit_frames([bbv_frame("n3", 1, "app", ["h", "new"])])
    assert key_rows(store) == {**keys, ("app", "new"): 5}
    store.close()


def test_a_rolled_back_commit_takes_its_new_key_ids_and_vectors_with_it(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    store.commit_frames([bbv_frame("n1", 1, "app", ["f"])])
    before = dict(store.bbv_keys.ids)
    with pytest.raises((duckdb.Error, OverflowError, pa.ArrowException)):
        store.commit_frames([bbv_frame("n1", 2, "app", ["g", "f"]), bbv_frame("n1", 3, "new", ["x"]),
                             samples_frame("n1", 4, ["m"]), unstorable_bbv(5)])
    assert store.bbv_keys.ids == before == key_rows(store) and store.bbv_keys.next == 2
    assert store.series.ids == {} == series_rows(store)
    assert store.cursor().execute("SELECT count(*) FROM bbv_vectors").fetchone()[0] == 1
    store.commit_frames([bbv_frame("n1", 3, "new", ["x"]), bbv_frame("n1", 2, "app", ["g", "f"])])
    assert key_rows(store) == store.bbv_keys.ids == {("app", "f"): 1, ("new", "x"): 2, ("app", "g"): 3}
    assert bbv_view(store) == [("n1", 1, "app", "f", 1, None, None), ("n1", 2, "app", "f", 2, None, None),
                               ("n1", 2, "app", "g", 1, None, None), ("n1", 3, "new", "x", 1, None, None)]
    store.close()


WRITES_EVERY_FRAME_TYPE = """
import sys
import numpy as np
import causewatch.daemon.server  # the ingesting process' modules
from causewatch import wire
from causewatch.daemon.store import Store, columns, results
store = Store(sys.argv[1])
bodies = {"hello": {"hostname": "h", "agent_version": "t", "cores": 2, "counters": {"cycles": "ok"}},
          "samples": wire.samples_body([1.0, 2.0], ["a", "b"], [[1.0, float("nan")], [2.0, 3.0]]),
          "bbv": {"target": "app", "kind": "native", "start": 0.0, "end": 1.0, "pid": 3,
                  "vector": {"keys": ["f"], "counts": [2]}},
          "task": {"app": "lu", "task_id": "t1", "start": 0.0, "duration": 1.0, "params": {"n": 1}},
          "region": {"app": "lu", "region": "r", "start": 0.0, "duration": 1.0, "counters": {"cycles": 5.0}},
          "probe_result": {"app": "mw", "kit": "k", "predicted_seconds": 1.0, "lo": 0.5, "hi": 1.5, "ratio": 1.0,
                           "probe_seconds": 0.1}}
frames = [wire.decode(wire.encode(kind, "n1", "b1", i + 1, body)) for i, (kind, body) in enumerate(bodies.items())]
assert len(store.commit_frames(frames).stored) == len(frames)
edges = columns.table({"src": columns.texts(["a"]), "dst": columns.texts(["b"]),
                       "strength": columns.numbers(np.array([0.5]))})
store.run(lambda con: results.insert_model(con, "lu", (0.0, 1.0), 10, 1.0, {}, edges))
counts = [store.cursor().execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in
          ("nodes", "samples", "bbv", "tasks", "regions", "probe_results", "edges")]
print(counts, "pandas" in sys.modules)
"""


def test_the_writer_loads_no_pandas_in_the_ingesting_process(tmp_path):
    """pyarrow's pa.array and pa.table import pandas on first use: the writer builds its columns from
    buffers (store.columns), so a daemon that stores every frame type and a model still has no pandas."""
    done = subprocess.run([sys.executable, "-c", WRITES_EVERY_FRAME_TYPE, str(tmp_path / "s.duckdb")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[1,", "4,", "1,", "1,", "1,", "1,", "1]", "False"]


def test_a_registered_table_is_named_for_its_block_and_a_failed_statement_keeps_its_own_error():
    """The writer names each Arrow table for its SQL (no replacement scan of a Python local): the name
    is gone after the block, and in a transaction a failed statement raises as it came (the aborted
    transaction refuses unregister; its rollback drops the name)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a BIGINT PRIMARY KEY)")
    with columns.registered(con, "incoming", pa.table({"a": [1, 2]})):
        con.execute("INSERT INTO t SELECT * FROM incoming")
    with pytest.raises(duckdb.CatalogException):
        con.execute("SELECT * FROM incoming")
    con.begin()
    with pytest.raises(duckdb.ConstraintException), columns.registered(con, "incoming", pa.table({"a": [2]})):
        con.execute("INSERT INTO t SELECT * FROM incoming")
    con.rollback()
    with pytest.raises(duckdb.CatalogException):
        con.execute("SELECT * FROM incoming")
    assert con.execute("SELECT a FROM t ORDER BY a").fetchall() == [(1,), (2,)]

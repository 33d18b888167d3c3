"""The ingest writer: exactly-once commits, resends recognised, late frames stored, nodes upserted."""

import duckdb
import numpy as np

from causewatch import wire
from causewatch.daemon.store import Store


def frames(seqs, node="n1", boot="b1"):
    return [wire.decode(wire.encode("samples", node, boot, s, wire.samples_body([float(s)], ["m"], [[s * 1.0]])))
            for s in seqs]


def test_resend_is_stored_once_and_late_frames_are_stored(tmp_path):
    """Issue 12 defect 1: a frame arriving after a higher seq (4 after 5) was refused and lost."""
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

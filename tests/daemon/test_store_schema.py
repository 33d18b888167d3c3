"""The store's schema: migrations apply once, and the table list derived from them is exactly the
base tables of a freshly migrated file, then the views an opened store has."""

import math

import duckdb
import numpy as np
import pytest

from causewatch import wire
from causewatch.daemon.store import Store, migrate
from causewatch.daemon.store.schema import BASE_TABLES, MIGRATIONS, TABLES, VERSION_TABLE
from causewatch.daemon.store.views import VIEWS


def test_migrations_apply_once(tmp_path):
    db = str(tmp_path / "s.duckdb")
    Store(db).close()
    store = Store(db)
    assert store.version == MIGRATIONS[-1][0]
    assert store.cursor().execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(MIGRATIONS)
    store.close()


def relations(con, kind: str) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_type = ?",
                                      [kind]).fetchall()]


def test_the_derived_table_list_is_every_table_of_a_migrated_store(tmp_path):
    """One list, read off the migrations, in the order they create the tables (a table that a later
    migration drops and creates again comes where it was created last); no view is a migration's."""
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    migrate(con)
    found = relations(con, "BASE TABLE")
    assert relations(con, "VIEW") == []
    con.close()
    assert sorted(BASE_TABLES) == sorted(found) and len(set(BASE_TABLES)) == len(BASE_TABLES)
    assert {"baselines", "samples_minute_agg", "schema_version", "series", "samples_hot"} <= set(BASE_TABLES)
    assert BASE_TABLES.index("probe_results") < BASE_TABLES.index("anomalies") < BASE_TABLES.index("baselines")


def test_an_opened_store_has_every_view_and_tables_lists_both(tmp_path):
    db = str(tmp_path / "s.duckdb")
    Store(db).close()
    with duckdb.connect(db, read_only=True) as con:   # the views persist: a read-only reader sees them
        assert sorted(relations(con, "VIEW")) == sorted(VIEWS)
        assert sorted(relations(con, "BASE TABLE")) == sorted(BASE_TABLES)
    assert TABLES == BASE_TABLES + VIEWS and not set(BASE_TABLES) & set(VIEWS)
    assert {"samples", "samples_minute"} <= set(VIEWS)


# ---- migration 6: a store written by the release before series ids, converted at open ----------------

def old_store(path: str) -> duckdb.DuckDBPyConnection:
    """A file as the release before migration 6 left it: migrations 1-5 applied, nothing else."""
    con = duckdb.connect(path)
    con.execute(VERSION_TABLE)
    for version, sql in MIGRATIONS:
        if version <= 5:
            con.execute(sql)
            con.execute("INSERT INTO schema_version VALUES (?, 0)", [version])
    return con


def old_samples_rows(frames: list[wire.Frame]) -> list[tuple]:
    """The release's samples rows of these frames (node, ts, scope, metric, value), a row per value,
    nulls as None: what its writer (samples_table, one dictionary-coded Arrow table) inserted."""
    out = []
    for f in frames:
        t, names, values, mask = wire.samples_arrays(f.body)
        for i, ts in enumerate(t):
            for j, name in enumerate(names):
                null = mask is not None and mask[i, j]
                out.append((f.node, float(ts), f.body["scope"], name, None if null else float(values[i, j])))
    return out


def old_frames(rng) -> list[wire.Frame]:
    """Frames of three nodes, two scopes, names that overlap, nulls, and times that are not whole ms."""
    out, seq = [], 0
    for node in ("n-1", "n_2", "n.3"):
        for scope in ("node", "cmd:stress"):
            for k in range(4):
                seq += 1
                names = [f"m{j}" for j in range(k % 2, 3 + k % 2)]
                t = 1.7e9 + 10 * seq + np.arange(5) * 0.25 + rng.integers(0, 1000, 5) * 1e-6
                values = rng.normal(0, 1e6, (5, len(names)))
                values[rng.random(values.shape) < 0.2] = np.nan
                out.append(wire.decode(wire.encode("samples", node, "b1", seq, wire.samples_body(t, names, values,
                                                                                                 scope))))
    return out


def rounded(rows: list[tuple], at: int) -> list[tuple]:
    """Rows with the time column at `at` as the migrated store shows it: to the nearest ms, in seconds."""
    return [(*r[:at], math.floor(r[at] * 1000 + 0.5) / 1000, *r[at + 1:]) for r in rows]


def ordered(rows) -> list[tuple]:
    return sorted(rows, key=lambda r: tuple((v is None, v if v is not None else 0) for v in r))


def test_a_store_of_the_previous_release_is_migrated_keeping_every_row(tmp_path):
    db = str(tmp_path / "old.duckdb")
    con = old_store(db)
    rng = np.random.default_rng(11)
    frames = old_frames(rng)
    samples = old_samples_rows(frames)
    # times on a rounding tie, below 1970, sub-ms, and a value at the limits of a double
    samples += [("n-1", 1.0005, "node", "tie", 1.0), ("n-1", -0.0004, "node", "tie", -1.0),
                ("n_2", 1.7e9 + 0.0004999, "node", "edge", 1.7976931348623157e308), ("n_2", 0.0, "node", "edge", None)]
    minutes = [("n-1", "node", "m0", 1.7e9 + 60 * k, 60, 0.5, -1.0, 2.0) for k in range(3)]
    minutes.append(("gone", "node", "only-aggregated", 1.6e9, 1, None, None, None))   # raw rows deleted long ago
    con.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", samples)
    con.executemany("INSERT INTO samples_minute VALUES (?, ?, ?, ?, ?, ?, ?, ?)", minutes)
    # phase vectors: two targets sharing a key, a key twice in one vector, pid and lost or NULL
    bbv = [("n-1", "b1", 50 + v, "app:x" if v % 3 else "pid:7", "python" if v % 2 else "native", 10.0 * v,
            10.0 * v + 1, key, count, v if v % 2 else None, None if v % 4 else 3)
           for v in range(8) for key, count in [("a.py:f", v), ("b.py:g", 1), ("a.py:f", 2)][:1 + v % 3]]
    con.executemany("INSERT INTO bbv (node, boot, seq, target, kind, t_start, t_end, key, count, pid, lost) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", bbv)
    con.executemany("INSERT INTO ingest_log VALUES (?, ?, ?, 'samples', ?, ?)",
                    [(f.node, f.boot, f.seq, f.ts, 1.0) for f in frames])
    con.execute("INSERT INTO tasks (node, boot, seq, app, task_id, t_start, duration, params) "
                "VALUES ('n-1', 'b1', 99, 'app', 't1', 1.5, 2.5, '{\"a\": 1}')")
    untouched = [t for t in BASE_TABLES if t in {"ingest_log", "tasks", "nodes", "regions", "probe_results"}]
    before = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in untouched}
    con.close()

    store = Store(db)
    cur = store.cursor()
    assert store.version == MIGRATIONS[-1][0]
    got = cur.execute("SELECT node, ts, scope, metric, value FROM samples").fetchall()
    assert ordered(got) == ordered(rounded(samples, 1)) and len(got) == len(samples)
    got = cur.execute("SELECT * FROM samples_minute").fetchall()
    assert ordered(got) == ordered(minutes)
    got = cur.execute("SELECT node, boot, seq, target, kind, t_start, t_end, key, count, pid, lost FROM bbv")
    assert ordered(got.fetchall()) == ordered(bbv)
    assert [r[0] for r in cur.execute("DESCRIBE bbv").fetchall()] == BBV_COLUMNS
    assert cur.execute("SELECT count(*) FROM bbv_vectors").fetchone()[0] == 8
    assert cur.execute("SELECT target, key FROM bbv_keys ORDER BY key_id").fetchall() == [
        ("app:x", "a.py:f"), ("app:x", "b.py:g"), ("pid:7", "a.py:f")]   # a dictionary per target
    assert [r[:2] for r in cur.execute("DESCRIBE samples").fetchall()] == SAMPLES_COLUMNS
    for t in untouched:
        assert cur.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() == before[t], t
    # one series per (node, scope, metric) of either table; the writer goes on with those ids
    n_series = len({(r[0], r[2], r[3]) for r in samples} | {m[:3] for m in minutes})
    assert cur.execute("SELECT count(*), max(series_id) FROM series").fetchone() == (n_series, n_series)
    again = wire.decode(wire.encode("samples", "n-1", "b2", 1, wire.samples_body([2e9], ["m0", "new"], [[1.0, 2.0]])))
    store.commit_frames([again])
    assert cur.execute("SELECT count(*) FROM series").fetchone()[0] == n_series + 1
    assert cur.execute("SELECT count(DISTINCT series_id) FROM samples_hot h JOIN series USING (series_id) "
                       "WHERE node = 'n-1' AND scope = 'node' AND metric = 'm0'").fetchone()[0] == 1
    store.close()


BBV_COLUMNS = ["node", "boot", "seq", "target", "kind", "t_start", "t_end", "key", "count", "pid", "lost"]
SAMPLES_COLUMNS = [("node", "VARCHAR"), ("ts", "DOUBLE"), ("scope", "VARCHAR"), ("metric", "VARCHAR"),
                   ("value", "DOUBLE")]


def test_a_sample_time_that_milliseconds_cannot_hold_stops_the_migration_changing_nothing(tmp_path):
    db = str(tmp_path / "old.duckdb")
    con = old_store(db)
    con.executemany("INSERT INTO samples VALUES ('n', ?, 'node', 'm', 1)", [(1.0,), (1e300,)])
    con.close()
    with pytest.raises(duckdb.Error, match="migration 6: 1 samples have a time beyond"):
        Store(db)
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 5
        assert con.execute("SELECT ts FROM samples ORDER BY ts").fetchall() == [(1.0,), (1e300,)]

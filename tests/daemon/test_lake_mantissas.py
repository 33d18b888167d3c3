"""The lake's values as decimal mantissas: every value a move or a merge writes reads back as the same
double, bit for bit (hostile ones too: not decimal, NaN, infinite, -0.0, huge, tiny), and a store whose
lake mixes files of the older layouts and the newest answers every reader as a store of the old alone."""

import functools
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from causewatch.daemon import rangeq, readers, store
from causewatch.daemon.job_compaction import CompactionJob
from causewatch.daemon.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_lake import DAY, T0, _ranges, compact, context, frames, reads

# What no mantissa can stand for, and decimals at every scale's edges (the mantissa's scale is its series').
HOSTILE = [0.1 + 0.2, 1 / 3, float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e300, -1e300, 5e-324,
           2.0**-1074 * 3, 2.0**53 + 2, 9.2e18, -(2.0**63), 1e17, 123456.789, -45.67, 1e-9, 1.23456789012,
           7 / 2048, 0.1, -0.1, 1e-10, 999999999.999999999, None]
DECIMALS = [round(v, 2) for v in np.linspace(-100, 100, 40)]


def _bits(rows) -> list:
    """Rows with each value as its double's bytes: NaN, -0.0 and their neighbours compared exactly."""
    return [(*r[:-1], None if r[-1] is None else struct.pack("<d", r[-1])) for r in rows]


def _hostile_store(path: Path) -> Store:
    """A store whose hot rows hold HOSTILE (series h, a second apart from T0) and DECIMALS (series d):
    written as SQL, since the wire refuses some of them (infinite values)."""
    s = Store(str(path))
    s.con.execute("INSERT INTO series VALUES (1, 'n1', 'node', 'h'), (2, 'n1', 'node', 'd'), (3, 'n2', 'node', 'h')")
    rows = [[1, int(T0 * 1000) + 1000 * k, v] for k, v in enumerate(HOSTILE)]
    rows += [[2, int(T0 * 1000) + 1000 * k, v] for k, v in enumerate(DECIMALS)]
    rows += [[3, int(T0 * 1000) + 1000 * k, v] for k, v in enumerate(HOSTILE[::-1])]
    s.con.executemany("INSERT INTO samples_hot VALUES (?, ?, ?)", rows)
    return s


def _everything(s: Store) -> list:
    with s.cursor() as cur:
        return _bits(cur.execute("SELECT node, scope, metric, ts, value FROM samples ORDER BY ALL").fetchall())


def _range_answers(s: Store) -> list:
    """Each function's range answer over every series, a slice of 3 s a point (hot and lake rows alike)."""
    every = [("metric", "=~", ".*")]
    with s.cursor() as cur:
        answers = [readers.ranges.answer(cur, rangeq.question(every, T0, T0 + 60, 3, None, fn, None, ()))
                   for fn in ("last", "min", "max", "count", "sum")]
    return [_bits([tuple(row.values()) for row in a.to_pylist()]) for a in answers]


def test_hostile_values_read_back_bit_for_bit_after_a_move_and_a_merge(tmp_path):
    s = _hostile_store(tmp_path / "c.duckdb")
    try:
        before, answers = _everything(s), _range_answers(s)
        with s.cursor() as cur:
            raw = _bits(cur.execute("SELECT series_id, ts, value FROM samples_raw ORDER BY ALL").fetchall())
        compact(s, T0 + 20)          # two files of the one day: the merge reads mantissas back and writes them
        compact(s, T0 + DAY)
        assert _everything(s) == before
        with s.cursor() as cur:
            (day, files), = readers.samples.lake_days_to_merge(cur, "2100-01-01")
            assert {layout for _, layout in files} == {store.views.MANTISSAS} and len(files) == 2
        staged, rows = store.lake.merge(str(s.lake), files)
        assert s.run(functools.partial(store.lake.swap, lake=str(s.lake), old=[f for f, _ in files], staged=staged,
                                       rows=rows))
        assert _everything(s) == before and _range_answers(s) == answers
        with s.cursor() as cur:
            assert _bits(cur.execute("SELECT series_id, ts, value FROM samples_raw ORDER BY ALL").fetchall()) == raw
            assert _bits(cur.execute("SELECT series_id, ts, value FROM samples_cold ORDER BY ALL").fetchall()) == raw
            (path,) = cur.execute("SELECT path FROM lake_files").fetchone()
            stored = cur.execute(f"SELECT metric, ts, value, mantissa, scale FROM read_parquet('{s.lake / path}') "
                                 "WHERE node = 'n1' ORDER BY metric, ts").fetchall()
    finally:
        s.close()
    decimal = {(t, v) for m, t, v, mantissa, scale in stored if m == "d" and mantissa is not None and v is None}
    assert len(decimal) == len(DECIMALS) and {sc for m, *_, sc in stored if m == "d"} == {2}
    kept = [HOSTILE[(t - int(T0 * 1000)) // 1000] for m, t, v, mantissa, _ in stored if m == "h" and mantissa is None]
    assert {struct.pack("<d", v) for v in kept if v is not None} >= {
        struct.pack("<d", v) for v in (0.1 + 0.2, 1 / 3, float("inf"), -0.0, 1e300, 5e-324, float("nan"))}


def _as_old_layout(s: Store, paths: list[str]) -> None:
    """Rewrite the lake files `paths` as the previous daemons wrote them (series id, value a DOUBLE, no
    mantissa) and list them so."""
    for path in paths:
        full, old = s.lake / path, (s.lake / path).with_suffix(".old")
        s.con.execute(f"COPY (SELECT node, scope, metric, series_id, ts, {store.mantissas.VALUE} AS value FROM "
                      f"read_parquet('{full}') ORDER BY node, scope, metric, ts) TO '{old}' "
                      f"({store.lake.COPY_OPTIONS})")
        os.replace(old, full)
        s.con.execute("UPDATE lake_files SET layout = ?, bytes = ? WHERE path = ?",
                      [store.views.IDS, full.stat().st_size, path])
    store.views.create_views(s.con, s.lake)


def _answers(s: Store) -> dict:
    """What every reader answers, the samples' values as their bytes, the range questions."""
    return {**reads(s), "bits": _everything(s), "ranges": _ranges(s)}


def _same(got: dict, want: dict) -> None:
    for name, value in want.items():
        if name == "ranges":    # a slice's sum adds its rows in the order of its files
            for a, b in zip(got[name], value, strict=True):
                pd.testing.assert_frame_equal(a, b)
        elif isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(got[name], value, check_exact=True, obj=name)
        else:
            assert got[name] == value, name


@pytest.fixture
def hot_old_mixed(tmp_path):
    """What a store of frames() answers while all its rows are hot, and two stores of the same frames
    whose lakes hold them in four files (two a day): every file of the old layout in one, the first
    day's of the newest in the other."""
    stores, hot = [], None
    for name in ("old", "mixed"):
        (tmp_path / name).mkdir()
        s = Store(str(tmp_path / name / "c.duckdb"))
        s.commit_frames(frames())
        hot = hot or _answers(s)
        for cut in (0.7, 1.4, 2.0):
            compact(s, T0 + cut * DAY)
        stores.append(s)
    for s, keep_new in zip(stores, (0, 2)):
        paths = [p for (p,) in s.con.execute("SELECT path FROM lake_files ORDER BY ts_min").fetchall()]
        _as_old_layout(s, paths[keep_new:])
    yield hot, *stores
    for s in stores:
        s.close()


def test_a_lake_of_old_and_new_files_answers_as_one_of_old_files_only(hot_old_mixed):
    hot, old, mixed = hot_old_mixed
    layouts = [sorted(layout for (layout,) in s.con.execute("SELECT layout FROM lake_files").fetchall())
               for s in (old, mixed)]
    assert layouts == [[store.views.IDS] * 4, [store.views.IDS] * 2 + [store.views.MANTISSAS] * 2]
    was = _answers(old)
    _same(was, hot)
    _same(_answers(mixed), was)
    # the compaction job rewrites each closed day of an older layout in the newest, a day a run
    job = CompactionJob(str(mixed.lake), hot_seconds=3600, clock=lambda: T0 + 10 * DAY)
    for _ in range(2):
        job.run(context(mixed))
    assert [layout for (layout,) in mixed.con.execute("SELECT layout FROM lake_files").fetchall()] == [
        store.views.MANTISSAS] * 2
    _same(_answers(mixed), was)


def test_the_newest_layout_takes_fewer_bytes_for_decimal_values(hot_old_mixed):
    """frames() values have two decimals: the same rows in the old layout's file take more."""
    _, old, mixed = hot_old_mixed
    sizes = [dict(s.con.execute("SELECT layout, sum(bytes) FROM lake_files WHERE ts_min < ? GROUP BY layout "
                                "", [int((T0 + 0.7 * DAY) * 1000)]).fetchall()) for s in (old, mixed)]
    assert sizes[1][store.views.MANTISSAS] < sizes[0][store.views.IDS]


def test_another_shard_reads_a_lake_of_both_layouts_through_its_manifest(tmp_path):
    s = Store(str(tmp_path / "a.duckdb"), lake=str(tmp_path / "lake"), shard="a")
    try:
        s.commit_frames(frames(nodes=2, days=1.0))
        want = s.con.execute("SELECT node, ts, scope, metric, value FROM samples WHERE metric = 'cpu' "
                             "ORDER BY ts, node, scope, metric").fetchall()
        for cut in (0.5, 1.0):
            compact(s, T0 + cut * DAY)
        first = s.con.execute("SELECT path FROM lake_files ORDER BY ts_min LIMIT 1").fetchone()[0]
        _as_old_layout(s, [first])
        s.run(functools.partial(store.lake.publish, lake=s.lake))
        assert s.con.execute("SELECT list(layout ORDER BY layout) FROM lake_files").fetchone()[0] == [
            store.views.IDS, store.views.MANTISSAS]
    finally:
        s.close()
    got = store.lake.shard_samples(tmp_path / "lake", "a", ["cpu"])
    assert _bits([tuple(r.values()) for r in got.to_pylist()]) == _bits(want)

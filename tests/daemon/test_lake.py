"""The Parquet lake over real DuckDB files and real Parquet: every reader of samples answers the same
before and after a move, a daemon killed mid-move leaves each value hot or cold exactly once, late rows
reach the lake at the next run, retention drops whole days, and a moved store still reads its lake."""

import argparse
import functools
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from causewatch import wire
from causewatch.commands.source import open_source
from causewatch.config import DaemonConfig, load
from causewatch.daemon import rangeq, readers, store, verbs
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_compaction import CHUNK, CompactionJob
from causewatch.daemon.job_retention import RetentionJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import Store
from causewatch.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import query

pytestmark = pytest.mark.service   # daemons as processes, killed mid-move

DAY = 86400.0
T0 = 1_790_000_000.0 - 1_790_000_000.0 % DAY   # a UTC midnight: the data start a day
KEY = ["node", "scope", "metric", "ts"]


def frames(nodes: int = 4, days: float = 2.0, step: float = 60.0, seq0: int = 1, t0: float = T0,
           per_frame: int = 30, seed: int = 0) -> list[wire.Frame]:
    """Samples of `nodes` nodes, three metrics each, every `step` s for `days` from t0; some NaN."""
    rng = np.random.default_rng(seed)
    t = t0 + np.arange(0, days * DAY, step) + rng.uniform(0, 0.999, int(days * DAY / step)).round(3)
    out = []
    for n in range(nodes):
        for i, start in enumerate(range(0, len(t), per_frame)):
            tt = t[start:start + per_frame]
            values = rng.normal(50, 20, (len(tt), 3)).round(2)
            values[rng.random(values.shape) < 0.02] = np.nan
            body = wire.samples_body(tt, ["cpu", "mem", "io"], values, scope="node" if n % 2 else "cmd:x")
            out.append(wire.decode(wire.encode("samples", f"n{n}", "b1", seq0 + i, body, ts=float(tt[-1]))))
    return out


def all_samples(s: Store) -> pd.DataFrame:
    with s.cursor() as cur:
        return readers.samples.samples_df(cur).sort_values(KEY, ignore_index=True)


def context(s: Store) -> JobContext:
    return JobContext(read=s.cursor, write=s.run, send=lambda *a: False, exporter=Exporter())


def compact(s: Store, cutoff: float) -> dict:
    return s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=int(cutoff * 1000)))


@pytest.fixture
def filled(tmp_path) -> Store:
    (tmp_path / "store").mkdir()
    s = Store(str(tmp_path / "store" / "c.duckdb"))
    s.commit_frames(frames())
    yield s
    s.close()


def reads(s: Store) -> dict:
    """What each reader of samples answers (the verbs, routes and analyses go through these)."""
    with s.cursor() as cur:
        return {"samples_df": readers.samples.samples_df(cur).sort_values(KEY, ignore_index=True),
                "one_metric": readers.samples.samples_df(cur, metrics=["mem"], scope="node", limit=50),
                "per_metric": readers.samples.samples_per_metric(cur),
                "rollup_bounds": readers.samples.rollup_bounds(cur),
                "live_counts": readers.report.live_counts(cur),
                "rows_per_metric": readers.report.overview(cur)["rows_per_metric"]}


def test_every_reader_answers_the_same_before_and_after_a_move(filled):
    before = reads(filled)
    assert len(compact(filled, T0 + 1.5 * DAY)["moved"]) == 2
    after = reads(filled)
    for name, value in before.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(after[name], value, check_exact=True, obj=name)
        else:
            assert after[name] == value, name
    with filled.cursor() as cur:
        tiers = readers.samples.tiers(cur)
    assert tiers["hot_values"] + tiers["cold_values"] == len(before["samples_df"])
    assert tiers["cold_values"] > tiers["hot_values"] > 0
    files = sorted(p.relative_to(filled.lake).as_posix() for p in filled.lake.rglob("*.parquet"))
    assert [f.split("/")[1] for f in files] == ["day=" + time.strftime("%Y-%m-%d", time.gmtime(T0 + d * DAY))
                                                for d in range(2)]


def test_lake_files_are_sorted_by_series_then_time(filled):
    compact(filled, T0 + 2 * DAY)
    with filled.cursor() as cur:
        for (path,) in cur.execute("SELECT path FROM lake_files").fetchall():
            df = cur.execute(f"SELECT node, scope, metric, ts FROM read_parquet('{filled.lake / path}')").df()
            pd.testing.assert_frame_equal(df, df.sort_values(KEY, ignore_index=True))


def store_files(db: Path) -> list:
    return query(db, "SELECT path FROM lake_files")


CRASHER = textwrap.dedent("""
    import functools, os, sys, time
    from causewatch.daemon import store
    s = store.Store(sys.argv[1])
    cut, step, end = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    replace = os.replace

    def renamed(src, dst):   # a lake file in its day's folder, its commit still to come: says so, waits
        replace(src, dst)
        if "day=" in str(dst):
            print("renamed", flush=True)
            time.sleep(1.0)

    if sys.argv[5:] == ["pause"]:
        os.replace = renamed
    print("ready", flush=True)
    while cut < end:
        cut += step
        s.run(functools.partial(store.lake.compact, lake=str(s.lake), cutoff_ms=int(cut * 1000)))
        print("moved", flush=True)
    print("done", flush=True)
""")


def test_a_daemon_killed_mid_move_keeps_each_value_once(tmp_path):
    """SIGKILL at random points of many moves, and (every other attempt) just after a file was renamed
    into its day's folder, before its commit: afterwards every acknowledged value is hot or cold, never
    both, never neither (audit per value), and no unlisted file survives the reopen."""
    db = tmp_path / "c.duckdb"
    s = Store(str(db))
    s.commit_frames(frames(nodes=6, days=3, step=30, per_frame=60))
    expected = all_samples(s)
    s.close()
    script = tmp_path / "crash.py"
    script.write_text(CRASHER)
    rng = random.Random(7)
    cut, unlisted = T0, 0
    end = T0 + 3 * DAY
    for attempt in range(8):
        child = subprocess.Popen([sys.executable, str(script), str(db), str(cut), str(CHUNK * 3), str(end)]
                                 + ["pause"] * (attempt % 2), stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        if attempt % 2:   # between a file's write and its commit, whatever the machine's speed
            while child.stdout.readline().strip() not in ("renamed", "done", ""):
                pass
        else:
            for _ in range(rng.randint(0, 2)):     # some moves commit, however loaded the machine
                child.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait()
        unlisted += len(set((tmp_path / "c.lake").rglob("*.parquet"))) > len(store_files(db))
        s = Store(str(db))
        with s.cursor() as cur:
            hot = cur.execute("SELECT s.node, s.scope, s.metric, h.ts FROM samples_hot h JOIN series s "
                              "USING (series_id)").df()
            files = [s.lake / p for (p,) in cur.execute("SELECT path FROM lake_files").fetchall()]
            cold = pd.concat([cur.execute(f"SELECT node, scope, metric, ts FROM read_parquet('{f}')").df()
                              for f in files]) if files else hot.iloc[:0]
            cut = (cur.execute("SELECT max(ts_max) FROM lake_files").fetchone()[0] or T0 * 1000) / 1000
        both = hot.merge(cold, on=KEY)
        assert both.empty, f"attempt {attempt}: {len(both)} values both hot and cold"
        assert len(hot) + len(cold) == len(expected), f"attempt {attempt}"
        pd.testing.assert_frame_equal(all_samples(s), expected, check_exact=True)
        on_disk = {p.resolve() for p in s.lake.rglob("*.parquet")} if s.lake.exists() else set()
        assert on_disk == {f.resolve() for f in files}, f"attempt {attempt}: unlisted files survived"
        s.close()
    assert cut > T0, "the kills never let a move commit: the test proved nothing"
    assert unlisted, "no kill fell between a file's write and its commit: the sweep went untested"


def test_rows_that_arrive_in_a_range_while_it_is_exported_move_with_it(filled):
    """The export runs on a read cursor while the writer stores frames: a backfill landing in the range
    between the export and the writer's adoption makes the counts differ, so the file is dropped and the
    writer exports the range again itself; every row moves once."""
    lake, cut = str(filled.lake), int((T0 + DAY) * 1000)
    (lo, hi), *_ = filled.run(lambda con: store.lake.slices(con, cut))
    with filled.cursor() as cur:
        staged, rows = store.lake.export(cur, lake, lo, hi)
    filled.commit_frames(frames(nodes=1, days=0.05, seq0=10_000, t0=T0 + 0.25 * DAY, seed=4))
    before = all_samples(filled)
    with filled.cursor() as cur:
        late = cur.execute("SELECT count(*) FROM samples_hot WHERE ts >= ? AND ts < ?", [lo, hi]).fetchone()[0] - rows
    assert late > 0
    moved = filled.run(functools.partial(store.lake.adopt, lake=lake, staged=staged, lo=lo, hi=hi, rows=rows))
    assert moved == rows + late and not (filled.lake / staged).exists()
    assert len(list(filled.lake.rglob("*.parquet"))) == 1
    pd.testing.assert_frame_equal(all_samples(filled), before, check_exact=True)
    with filled.cursor() as cur:
        assert cur.execute("SELECT count(*) FROM samples_hot WHERE ts >= ? AND ts < ?", [lo, hi]).fetchone()[0] == 0


def test_late_rows_reach_the_lake_at_the_next_run(filled):
    """An agent backfilling after an outage: rows already older than the hot window go at the next run
    (minutes), into a file of their own day; the gauges say where the values sit."""
    now = T0 + 2 * DAY + 7200
    job = CompactionJob(str(filled.lake), hot_seconds=3600, clock=lambda: now)
    ctx = context(filled)
    job.run(ctx)
    stored = len(all_samples(filled))
    filled.commit_frames(frames(nodes=1, days=0.1, seq0=10_000, t0=T0 + 0.5 * DAY, seed=3))
    late = len(all_samples(filled)) - stored
    job.run(ctx)
    day = time.strftime("%Y-%m-%d", time.gmtime(T0))
    assert job.moved_ == {day: late}
    assert job.merged_ == day, "the late file and the day's first were not merged into one"
    with filled.cursor() as cur:
        assert cur.execute("SELECT count(*) FROM samples_hot").fetchone()[0] == 0
        assert cur.execute("SELECT count(*) FROM lake_files WHERE day = ?::DATE", [day]).fetchone()[0] == 1
    assert len(all_samples(filled)) == stored + late
    text = ctx.exporter.exposition().decode()
    assert f'causewatch_store_values{{tier="cold"}} {float(stored + late)}' in text
    assert 'causewatch_store_values{tier="hot"} 0.0' in text


def test_a_closed_day_is_merged_into_one_sorted_file_and_a_stale_merge_is_refused(filled):
    for k in range(1, 7):
        compact(filled, T0 + k * 0.4 * DAY)
    expected = all_samples(filled)
    with filled.cursor() as cur:
        days = readers.samples.lake_days_to_merge(cur, "2100-01-01")
    assert [len(files) for _, files in days] == [3, 3], "the moves did not cut the days into several files"
    (day, files), (_, other) = days
    staged, rows = store.lake.merge(str(filled.lake), files)
    paths, other = [f for f, _ in files], [f for f, _ in other]
    assert not filled.run(functools.partial(store.lake.swap, lake=str(filled.lake), old=paths + other[:1],
                                            staged=staged, rows=rows)), "a swap across two days was taken"
    assert filled.run(functools.partial(store.lake.swap, lake=str(filled.lake), old=paths, staged=staged,
                                        rows=rows))
    pd.testing.assert_frame_equal(all_samples(filled), expected, check_exact=True)
    compact(filled, T0)      # its sweep takes the unlisted originals
    with filled.cursor() as cur:
        (path,) = cur.execute("SELECT path FROM lake_files WHERE day = ?::DATE", [day]).fetchone()
        df = cur.execute(f"SELECT node, scope, metric, ts FROM read_parquet('{filled.lake / path}')").df()
    pd.testing.assert_frame_equal(df, df.sort_values(KEY, ignore_index=True))
    assert sorted(p.relative_to(filled.lake).as_posix() for p in filled.lake.rglob("*.parquet")) == sorted(
        [path, *other])


def _ranges(s: Store) -> list[pd.DataFrame]:
    """Range questions over both days: each series' means, a node's maxima, one metric's newest values."""
    asked = [([("metric", "=", "mem")], 1800, "avg", None, ()),
             ([("node", "=", "n1")], 3600, "max", "max", ("metric",)),
             ([("metric", "=~", "c.*")], 900, "last", "sum", ("node",))]
    with s.cursor() as cur:
        return [readers.ranges.answer(cur, rangeq.question(m, T0 + 600, T0 + 1.9 * DAY, 900, w, fn, agg, by))
                .to_pandas() for m, w, fn, agg, by in asked]


def test_a_lake_file_that_names_its_series_only_reads_alike_until_a_merge_gives_it_ids(filled):
    """Files of the first layout (as daemons wrote them before the series id column): every reader
    answers as from the newest layout, and the compaction job rewrites each such closed day with ids."""
    compact(filled, T0 + 2 * DAY)
    before, answers = reads(filled), _ranges(filled)
    assert all(len(a) for a in answers)
    with filled.cursor() as cur:
        paths = [filled.lake / p for (p,) in cur.execute("SELECT path FROM lake_files").fetchall()]
    for path in paths:
        old = path.with_suffix(".old")
        filled.con.execute(f"COPY (SELECT node, scope, metric, ts, {store.mantissas.VALUE} AS value FROM "
                           f"read_parquet('{path}') ORDER BY ALL) TO '{old}' (FORMAT parquet)")
        os.replace(old, path)
    filled.con.execute("UPDATE lake_files SET layout = ?", [store.views.NAMES])
    store.views.create_views(filled.con, filled.lake)
    with filled.cursor() as cur:
        columns = cur.execute(f"DESCRIBE SELECT * FROM read_parquet('{paths[0]}')").df().column_name
    assert "series_id" not in set(columns)

    def same() -> None:
        after = reads(filled)
        for name, value in before.items():
            if isinstance(value, pd.DataFrame):
                pd.testing.assert_frame_equal(after[name], value, check_exact=True, obj=name)
            else:
                assert after[name] == value, name
        for got, want in zip(_ranges(filled), answers, strict=True):
            pd.testing.assert_frame_equal(got, want)

    same()
    job = CompactionJob(str(filled.lake), hot_seconds=3600, clock=lambda: T0 + 10 * DAY)
    for _ in paths:   # a day a run
        job.run(context(filled))
    with filled.cursor() as cur:
        assert cur.execute("SELECT list(DISTINCT layout) FROM lake_files").fetchone()[0] == [store.views.MANTISSAS]
    same()


def test_retention_drops_whole_days_of_the_lake_after_rolling_them_up(tmp_path, filled):
    """Raw samples go a UTC day at a time: the lake's older days are unlisted (their files swept at the
    next move), the hot rows before the cut deleted, the export holds exactly what went, and the
    per-minute aggregates of the dropped rows were computed from them, cold as they were."""
    compact(filled, T0 + 1.5 * DAY)
    expected = all_samples(filled)
    now = T0 + 2 * DAY + 3600        # a one-day window cuts at T0 + 1 day: day 0 goes
    export = tmp_path / "export"
    export.mkdir()
    job = RetentionJob(samples_days=1, bbv_days=1, minute_days=30, export=str(export), lake=str(filled.lake),
                       clock=lambda: now)
    job.run(context(filled))
    kept, gone = expected[expected.ts >= T0 + DAY], expected[expected.ts < T0 + DAY]
    assert job.deleted_["samples"] == len(gone) > 0
    pd.testing.assert_frame_equal(all_samples(filled), kept.reset_index(drop=True), check_exact=True)
    exported = pd.read_parquet(next(export.glob("samples-*.parquet"))).sort_values(KEY, ignore_index=True)
    pd.testing.assert_frame_equal(exported, gone.reset_index(drop=True), check_exact=True)
    with filled.cursor() as cur:
        minutes = readers.samples.samples_minute(cur, until=T0 + DAY)
    assert minutes["count"].sum() == gone.value.notna().sum()
    compact(filled, T0)
    assert not [p for p in filled.lake.rglob("*.parquet") if "day=" + time.strftime("%Y-%m-%d", time.gmtime(T0))
                in str(p)], "the dropped day's files were not swept"


def test_a_store_moved_whole_still_reads_its_lake(tmp_path, filled):
    compact(filled, T0 + 1.5 * DAY)
    expected = all_samples(filled)
    filled.close()
    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "store"), moved)
    s = Store(str(moved / "c.duckdb"))
    pd.testing.assert_frame_equal(all_samples(s), expected, check_exact=True)
    s.close()


def test_a_moved_store_reads_its_lake_with_db_and_no_daemon(tmp_path, filled):
    """A backup restored elsewhere: `--db NEWPATH` reads the lake's rows without a daemon re-pointing
    the views first, and the file, opened read-only, is left as it was."""
    compact(filled, T0 + 1.5 * DAY)
    expected = all_samples(filled)
    filled.close()
    moved = tmp_path / "restored"
    shutil.move(str(tmp_path / "store"), moved)
    db = moved / "c.duckdb"
    before = db.read_bytes()
    with open_source(argparse.Namespace(db=str(db))) as source:
        got = source.read(verbs.SAMPLES).sort_values(KEY, ignore_index=True)
        stats = source.read(verbs.STATS)
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert stats["tables"]["samples"] == len(expected)
    assert db.read_bytes() == before


def test_a_listed_file_that_is_gone_is_named_and_the_rest_still_reads(filled, caplog):
    compact(filled, T0 + 1.5 * DAY)
    first = sorted(filled.lake.rglob("*.parquet"))[0]
    with filled.cursor() as cur:
        lost = cur.execute(f"SELECT count(*) FROM read_parquet('{first}')").fetchone()[0]
    total = len(all_samples(filled))
    filled.close()
    first.unlink()
    s = Store(filled.path)
    assert "listed but missing" in caplog.text and first.name in caplog.text
    assert len(all_samples(s)) == total - lost
    s.close()


def test_a_lake_that_cannot_be_written_keeps_the_rows_hot(tmp_path):
    (tmp_path / "c.lake").write_text("a file where the lake folder should be")
    s = Store(str(tmp_path / "c.duckdb"))
    s.commit_frames(frames(days=1))
    before = all_samples(s)
    with pytest.raises(OSError):
        compact(s, T0 + DAY)
    pd.testing.assert_frame_equal(all_samples(s), before, check_exact=True)
    with s.cursor() as cur:
        assert cur.execute("SELECT count(*) FROM lake_files").fetchone()[0] == 0
    s.close()


@pytest.mark.parametrize("path", ["{tmp}/a-file/lake", "/etc/hostname/lake", "{tmp}/nul\\u0000lake"])
def test_an_impossible_lake_setting_names_it(tmp_path, path):
    (tmp_path / "a-file").write_text("")
    cfg = tmp_path / "d.toml"
    cfg.write_text(f'store_lake = "{path.format(tmp=tmp_path)}"\n')
    with pytest.raises(ConfigError, match="store_lake"):
        load(DaemonConfig, cfg)


def test_no_lake_for_an_in_memory_store_or_a_zero_window():
    assert CompactionJob.from_config(DaemonConfig(db=":memory:")) is None
    assert CompactionJob.from_config(DaemonConfig(db="x.duckdb", store_hot_seconds=0.0)) is None
    job = CompactionJob.from_config(DaemonConfig(db="/srv/cw/x.duckdb"))
    assert job.lake == "/srv/cw/x.lake" and os.path.isabs(job.lake)

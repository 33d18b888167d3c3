"""Retention over a real DuckDB store: rows older than each window go (boundary rows on both sides),
per-minute aggregates stay and equal what the raw rows gave, the Parquet export holds exactly the
deleted rows, late rows are folded into their minute, and a bad retention setting exits 2 naming it."""

import functools
import math
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from causewatch import wire
from causewatch.config import DaemonConfig, load
from causewatch.daemon import readers
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_retention import DAY, RetentionJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import Store
from causewatch.daemon.store.retention import trim_ingest_log
from causewatch.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import run_cli

# Three days ahead of the wall clock: every ingest_log row (received now) is past a one-day window.
NOW = math.floor(time.time() / 60) * 60 + 3 * DAY
RAW_CUT = NOW - DAY           # minute-aligned, so the raw window's start is exact
AGG = ["count", "mean", "min", "max"]


def samples_frames(ts: np.ndarray, seq0: int, rng, per_frame: int = 50, boot: str = "b1") -> list[wire.Frame]:
    out = []
    for i, start in enumerate(range(0, len(ts), per_frame)):
        t = ts[start:start + per_frame]
        body = wire.samples_body(t, ["cpu", "mem"], rng.normal(50, 20, (len(t), 2)))
        out.append(wire.decode(wire.encode("samples", "n1", boot, seq0 + i, body, ts=float(t[-1]))))
    return out


def bbv_frame(seq: int, start: float) -> wire.Frame:
    body = {"target": "app:x", "kind": "python", "start": start, "end": start + 1.0,
            "vector": {"keys": ["f", "g"], "counts": [3, 4]}}
    return wire.decode(wire.encode("bbv", "n1", "b1", seq, body, ts=start + 1.0))


def expected_minutes(raw: pd.DataFrame) -> pd.DataFrame:
    g = raw.assign(minute=np.floor(raw.ts / 60) * 60).groupby(["node", "scope", "metric", "minute"])["value"]
    return g.agg(AGG).reset_index().sort_values(["minute", "node", "scope", "metric"], ignore_index=True)


def all_rows(store: Store, table: str) -> pd.DataFrame:
    with store.cursor() as cur:
        return readers.shared.read_table(cur, table)


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "r.duckdb"))
    yield s
    s.close()


def test_retention_deletes_what_is_older_and_keeps_exact_aggregates(store, tmp_path):
    rng = np.random.default_rng(7)
    # 20 minutes of 1 Hz samples around the raw cutoff, a row just before and one on it, and one row
    # older than the aggregates' window (30 days).
    ts = np.sort(np.concatenate([RAW_CUT - 600 + np.arange(1200.0), [RAW_CUT - 0.001, NOW - 40 * DAY]]))
    frames = samples_frames(ts, 1, rng)
    bbv = [bbv_frame(len(frames) + 1, NOW - DAY - 0.001), bbv_frame(len(frames) + 2, NOW - DAY)]
    assert len(store.commit_frames(frames + bbv).stored) == len(frames) + 2
    raw_before, bbv_before = all_rows(store, "samples"), all_rows(store, "bbv")
    log_before = all_rows(store, "ingest_log")

    export = tmp_path / "export"
    export.mkdir()
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job = RetentionJob(samples_days=1, bbv_days=1, minute_days=30, export=str(export), clock=lambda: NOW)
    job.run(ctx)

    kept = all_rows(store, "samples")
    gone = raw_before[raw_before.ts < RAW_CUT]
    assert len(kept) == (raw_before.ts >= RAW_CUT).sum() and kept.ts.min() == RAW_CUT   # the row on it stays
    assert (gone.ts == RAW_CUT - 0.001).sum() == 2                                     # both metrics of it went
    assert job.deleted_["samples"] == len(gone) and len(gone) == 2 * 602

    # The aggregates are those of every raw row, but the minute older than their own window is gone.
    aggs = minutes(store)
    want = expected_minutes(raw_before)
    want = want[want.minute >= NOW - 30 * DAY].reset_index(drop=True)
    assert len(aggs) == len(want) == 2 * 20   # 20 minutes of two metrics
    pd.testing.assert_frame_equal(aggs, want, check_dtype=False, check_exact=False)

    # The export holds exactly the deleted rows, table by table.
    def exported(table):
        return duckdb.sql(f"SELECT * FROM read_parquet('{export}/{table}-*.parquet')").df()
    key = ["ts", "metric"]
    pd.testing.assert_frame_equal(exported("samples").sort_values(key, ignore_index=True),
                                  gone.sort_values(key, ignore_index=True), check_dtype=False)
    assert sorted(exported("bbv").t_start) == sorted(bbv_before[bbv_before.t_start < NOW - DAY].t_start)
    assert all_rows(store, "bbv").t_start.unique().tolist() == [NOW - DAY]
    assert exported("samples_minute").minute.tolist() == [math.floor((NOW - 40 * DAY) / 60) * 60] * 2

    # The log keeps the newest frame of the boot (the high-water mark a reopened store starts from).
    log = all_rows(store, "ingest_log")
    assert log.seq.tolist() == [log_before.seq.max()] and job.deleted_["ingest_log"] == len(log_before) - 1


def test_a_frame_resent_after_the_log_was_trimmed_is_still_a_duplicate(store):
    """Exactly-once outlives the log's trim: an agent that lost its acks and resends a frame whose log
    row retention deleted gets it acked as a duplicate, not stored twice (each boot's trim watermark)."""
    rng = np.random.default_rng(5)
    frames = samples_frames(RAW_CUT + np.arange(300.0), 1, rng)
    store.commit_frames(frames)
    before = all_rows(store, "samples")
    store.run(functools.partial(trim_ingest_log, cutoff=NOW))
    assert len(all_rows(store, "ingest_log")) == 1
    verdicts = store.commit_frames(frames[:3] + [frames[-1]])
    assert len(verdicts.duplicate) == 4 and not verdicts.stored
    pd.testing.assert_frame_equal(all_rows(store, "samples"), before)
    store.close()
    reopened = Store(store.path)
    assert len(reopened.commit_frames(frames[:2]).duplicate) == 2
    other_boot = samples_frames(RAW_CUT + np.arange(50.0), 1, rng, boot="b9")
    assert len(reopened.commit_frames(other_boot).stored) == 1, "another boot's frames were taken as resends"
    reopened.close()


def test_late_rows_are_folded_into_their_minute(store):
    rng = np.random.default_rng(3)
    ts = RAW_CUT - 300 + np.arange(600.0)
    frames = samples_frames(ts, 1, rng)
    store.commit_frames(frames)
    raw_first = all_rows(store, "samples")
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job = RetentionJob(samples_days=1, bbv_days=1, minute_days=30, clock=lambda: NOW)
    job.run(ctx)
    # A reconnecting agent delivers rows of a minute whose raw rows are gone, and of one still raw.
    late = samples_frames(np.array([RAW_CUT - 90.5, RAW_CUT - 89.5, RAW_CUT + 30.5]), 1, rng, boot="b2")
    store.commit_frames(late)
    raw_late = all_rows(store, "samples")
    raw_late = raw_late[raw_late.ts.isin([RAW_CUT - 90.5, RAW_CUT - 89.5, RAW_CUT + 30.5])]
    job.run(ctx)
    # Rows of a deleted minute are merged at once; those of a raw minute when it leaves the window.
    want = expected_minutes(pd.concat([raw_first, raw_late]))
    aggs = minutes(store)
    merged, still_raw = want.minute == RAW_CUT - 120, want.minute == RAW_CUT
    pd.testing.assert_frame_equal(aggs[merged], want[merged], check_dtype=False, check_exact=False)
    assert (aggs[still_raw]["count"] == 60).all() and (want[still_raw]["count"] == 61).all()
    job.clock = lambda: NOW + 60
    job.run(ctx)
    pd.testing.assert_frame_equal(minutes(store), want, check_dtype=False, check_exact=False)
    assert all_rows(store, "samples").ts.min() == RAW_CUT + 60


def unit_frame(seq: int, unit: str, start: float, end: float | None, **body) -> wire.Frame:
    event = {"event": "start"} if end is None else {"event": "end", "end": end}
    return wire.decode(wire.encode("unit", "n1", "b1", seq, {"unit": unit, "kind": "job", "start": start, **event,
                                                             **body}))


def test_a_finished_jobs_summary_outlives_its_samples_until_its_own_window(store):
    """Samples go after a day; a job that ended 10 days ago keeps its row and its report (from the totals
    its end brought); one that ended 40 days ago goes with a 30-day window; a running one stays."""
    store.commit_frames([
        unit_frame(1, "job:1", NOW - 41 * DAY, NOW - 40 * DAY, job_id="1"),
        unit_frame(2, "job:2", NOW - 11 * DAY, NOW - 10 * DAY, job_id="2", cpus=2.0,
                   totals={"unit_cpu_seconds_total": 86400.0}),
        unit_frame(3, "job:3", NOW - 100 * DAY, None, job_id="3"),
        wire.decode(wire.encode("samples", "n1", "b1", 4, wire.samples_body(
            [NOW - 10.5 * DAY], ["unit_cpu_seconds_total"], [[5.0]], "job:2")))])
    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    job = RetentionJob(samples_days=1, bbv_days=1, minute_days=30, units_days=30, clock=lambda: NOW)
    job.run(ctx)
    assert job.deleted_["units"] == 1 and job.deleted_["samples"] == 1
    assert sorted(all_rows(store, "units").unit) == ["job:2", "job:3"]
    with store.cursor() as cur:
        [report] = readers.units.report(cur, "2")
    assert (report["cpu_seconds"], report["cpu_efficiency"]) == (86400.0, 0.5)


def test_a_job_without_totals_keeps_its_report_from_its_samples_past_their_retention(store):
    """A job that ended while its agent was down brought no totals: its report comes from its samples
    (CPU, memory's high-water, I/O, pressure; its step's too), and after retention deleted every one of
    them the same figures come from the summary retention kept; the summary goes with the job's row."""
    t = NOW - 10 * DAY + np.arange(0.0, 600.0, 10.0)
    metrics = ["unit_cpu_seconds_total", "unit_memory_bytes", "unit_io_read_bytes_total",
               "unit_pressure_io_waiting_seconds_total"]
    job = np.column_stack([np.cumsum(np.full(len(t), 7.5)), 1e9 + 1e8 * np.sin(t), np.cumsum(np.full(len(t), 4096.0)),
                           np.linspace(0, 3, len(t))])
    step = job[:, :2] * 0.5

    def samples(seq, scope, values, names):
        return wire.decode(wire.encode("samples", "n1", "b1", seq, wire.samples_body(t, names, values, scope)))

    store.commit_frames([
        unit_frame(1, "job:5", NOW - 10 * DAY, NOW - 10 * DAY + 900, job_id="5", cpus=8.0, memory_bytes=4 * 2**30,
                   extra={"ended_unseen": True}),
        unit_frame(2, "step:5.0", NOW - 10 * DAY, NOW - 10 * DAY + 800, kind="step", job_id="5", step="0",
                   parent="job:5"),
        samples(3, "job:5", job, metrics), samples(4, "step:5.0", step, metrics[:2])])
    with store.cursor() as cur:
        [before] = readers.units.report(cur, "5")
    assert before["counted_from"] == "samples" and before["cpu_seconds"] == job[-1, 0]
    assert before["memory_peak_bytes"] == job[:, 1].max() and before["io_read_bytes"] == job[-1, 2]
    assert before["steps"][0]["cpu_seconds"] == step[-1, 0]

    ctx = JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())
    RetentionJob(samples_days=1, bbv_days=1, minute_days=30, units_days=30, clock=lambda: NOW).run(ctx)
    assert all_rows(store, "samples").empty
    with store.cursor() as cur:
        [after] = readers.units.report(cur, "5")
    assert after["counted_from"] == "summary" and after["steps"][0]["counted_from"] == "summary"
    assert {**after, "counted_from": "samples", "steps": None} == {**before, "steps": None}
    def steps(report):
        return [{**s, "counted_from": None} for s in report["steps"]]
    assert steps(after) == steps(before)

    later = RetentionJob(samples_days=1, bbv_days=1, minute_days=5, units_days=5, clock=lambda: NOW)
    later.run(ctx)
    assert later.deleted_["units"] == 2 and later.deleted_["unit_summaries"] == 2
    assert all_rows(store, "unit_summaries").empty


def minutes(store: Store) -> pd.DataFrame:
    aggs = all_rows(store, "samples_minute").sort_values(["minute", "node", "scope", "metric"], ignore_index=True)
    return aggs[["node", "scope", "metric", "minute", *AGG]]


@pytest.mark.parametrize("line, named", [
    ("retain_samples_days = -1", "retain_samples_days: -1.0 is out of range"),
    ('retain_bbv_days = "a week"', "retain_bbv_days: expected float"),
    ("retain_samples_minute_days = 3", "retain_samples_minute_days: 3.0 is shorter than retain_samples_days"),
    ("retain_units_days = 2", "retain_units_days: 2.0 is shorter than retain_samples_days"),
    ('retention_export = "/no/such/folder"', "retention_export: /no/such/folder: no such writable folder"),
])
def test_a_bad_retention_setting_is_refused_naming_it(tmp_path, line, named):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(f'[daemon]\ndb = "x.duckdb"\n{line}\n')
    with pytest.raises(ConfigError) as e:
        load(DaemonConfig, cfg, section="daemon")
    assert str(e.value).startswith(f"{cfg}:3: {named}")


def test_the_daemon_exits_2_on_a_bad_retention_setting(tmp_path):
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(f'[daemon]\ndb = "{tmp_path / "x.duckdb"}"\nretain_samples_days = 30\n'
                   "retain_samples_minute_days = 7\n")
    done = run_cli("daemon", "--config", str(cfg), timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{cfg}:4: retain_samples_minute_days: 7.0 is shorter than retain_samples_days (30.0" in done.stderr
    assert not (tmp_path / "x.duckdb").exists()

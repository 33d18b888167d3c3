"""The fuzzy analysis job over a real DuckDB store: scores rows and the severity gauge."""

import json
import threading

import duckdb
import pytest

from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_fuzzy import GAUGE, FuzzyJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import create_views, migrate

NOW = 10_000.0


@pytest.fixture
def con(tmp_path):
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    migrate(con)
    create_views(con)
    regions = [("n1", "PARTICLE_LOAD", 0.9497242344418835, NOW - 60), ("n1", "MPI_SEND", 0.6550124668722567, NOW - 60),
               ("n2", "PARTICLE_LOAD", 0.5, NOW - 60), ("n2", "OLD", 0.99, NOW - 5000)]
    con.executemany("INSERT INTO regions VALUES (?, 'b', 1, '3dpic', ?, ?, 1, 1, NULL, ?, NULL, NULL)",
                    [(n, r, t, json.dumps({"L2_TCM": m, "L2_TCA": 1.0})) for n, r, m, t in regions])
    yield con
    con.close()


def _ctx(con):
    lock = threading.Lock()

    def write(fn):  # the daemon's writer: one transaction
        with lock:
            con.begin()
            fn(con)
            con.commit()
    return JobContext(read=con.cursor, write=write, send=lambda *a: True, exporter=Exporter())


def _gauges(ctx):
    lines = ctx.exporter.exposition().decode().splitlines()
    return sorted(line for line in lines if line.startswith(GAUGE + "{") and "l2_miss_ratio" in line)


def test_job_stores_scores_and_exports_severity(con):
    ctx = _ctx(con)
    FuzzyJob(clock=lambda: NOW).run(ctx)
    rows = con.execute("SELECT ts, node, region, source, metric, term, round(degree, 3), round(severity, 3) "
                       "FROM scores WHERE metric = 'l2_miss_ratio' ORDER BY node, region, severity").fetchall()
    assert rows == [(NOW, "n1", "MPI_SEND", "region", "l2_miss_ratio", "negligible", 0.1, 0.0),
                    (NOW, "n1", "PARTICLE_LOAD", "region", "l2_miss_ratio", "medium", 0.502, 0.335),
                    (NOW, "n1", "PARTICLE_LOAD", "region", "l2_miss_ratio", "high", 0.495, 0.495)]
    gauges = _gauges(ctx)
    assert len(gauges) == 2
    assert gauges[1].startswith(f'{GAUGE}{{app="3dpic",metric="l2_miss_ratio",node="n1",region="PARTICLE_LOAD"}} 0.495')


def test_job_republishes_only_current_bottlenecks(con):
    ctx = _ctx(con)
    FuzzyJob(clock=lambda: NOW).run(ctx)
    con.execute("DELETE FROM regions WHERE region = 'MPI_SEND'")
    FuzzyJob(clock=lambda: NOW + 1).run(ctx)
    assert [g.split("region=")[1][:15] for g in _gauges(ctx)] == ['"PARTICLE_LOAD"']
    assert con.execute("SELECT count(DISTINCT ts) FROM scores").fetchone()[0] == 2


def test_job_on_an_empty_store(tmp_path):
    con = duckdb.connect(str(tmp_path / "empty.duckdb"))
    migrate(con)
    create_views(con)
    ctx = _ctx(con)
    FuzzyJob(clock=lambda: NOW).run(ctx)
    assert con.execute("SELECT count(*) FROM scores").fetchone()[0] == 0 and _gauges(ctx) == []


def test_same_named_regions_of_two_apps_are_two_series(con):
    """Five apps' `render` regions on one node were one series, the worst app's severity for all."""
    con.executemany("INSERT INTO regions VALUES ('n3', 'b', 1, ?, 'render', ?, 1, 1, NULL, ?, NULL, NULL)",
                    [(app, NOW - 60, json.dumps({"L2_TCM": m, "L2_TCA": 1.0})) for app, m in (("a", 0.95), ("b", 0.8))])
    ctx = _ctx(con)
    FuzzyJob(clock=lambda: NOW).run(ctx)
    render = [g.split(" ")[0] for g in _gauges(ctx) if 'region="render"' in g]
    assert render == [f'{GAUGE}{{app="a",metric="l2_miss_ratio",node="n3",region="render"}}',
                      f'{GAUGE}{{app="b",metric="l2_miss_ratio",node="n3",region="render"}}']

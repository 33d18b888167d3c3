"""The store's schema: versioned migrations, applied once each (`schema_version` records them), and
TABLES, the one list of what the store's SQL names: the base tables, read off the migrations' own
statements, then the views over them (`views.VIEWS`, made at each open by `views.create_views`)."""

from __future__ import annotations

import re
import time

import duckdb

from causewatch.daemon.store.views import VIEWS

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
    # Series ids: a sample row is (series id, ms, value), the strings once per series in
    # `series`; a phase vector is one `bbv_vectors` row and its (key id, count) pairs, the keys once per
    # target in `bbv_keys`. The old tables' rows are copied across, times rounded to the millisecond,
    # sorted by (series, time); the views of the old names and columns are made by views.create_views.
    # No primary key on the large tables: DuckDB holds a key's index in memory.
    (6, """
    SELECT CASE WHEN count(*) > 0 THEN error(printf(
        'migration 6: %d samples have a time beyond +-2^43 s, which integer milliseconds cannot hold exactly '
        '(delete them, e.g. DELETE FROM samples WHERE abs(ts) >= 2^43, and open the store again)', count(*))) END
        FROM samples WHERE abs(ts) >= 8796093022208;   -- 2^43 s: wire.MAX_TIME
    CREATE TABLE series (series_id INTEGER PRIMARY KEY, node VARCHAR NOT NULL, scope VARCHAR NOT NULL,
        metric VARCHAR NOT NULL, UNIQUE (node, scope, metric));
    INSERT INTO series SELECT row_number() OVER (ORDER BY node, scope, metric), node, scope, metric
        FROM (SELECT node, scope, metric FROM samples UNION SELECT node, scope, metric FROM samples_minute);
    CREATE TABLE samples_hot (series_id INTEGER, ts BIGINT, value DOUBLE);
    INSERT INTO samples_hot SELECT s.series_id, floor(o.ts * 1000 + 0.5)::BIGINT AS ms, o.value
        FROM samples o JOIN series s USING (node, scope, metric) ORDER BY s.series_id, ms;
    DROP TABLE samples;
    CREATE TABLE samples_minute_agg (series_id INTEGER, minute BIGINT, count BIGINT, mean DOUBLE, min DOUBLE,
        max DOUBLE);
    INSERT INTO samples_minute_agg SELECT s.series_id, floor(o.minute * 1000 + 0.5)::BIGINT AS ms, o.count,
        o.mean, o.min, o.max FROM samples_minute o JOIN series s USING (node, scope, metric) ORDER BY s.series_id, ms;
    DROP TABLE samples_minute;
    CREATE TABLE bbv_keys (key_id INTEGER PRIMARY KEY, target VARCHAR, key VARCHAR, UNIQUE (target, key));
    INSERT INTO bbv_keys SELECT row_number() OVER (ORDER BY target, key), target, key
        FROM (SELECT DISTINCT target, key FROM bbv);
    CREATE SEQUENCE bbv_vector_ids;
    CREATE TABLE bbv_vectors (vector_id BIGINT, node VARCHAR, boot VARCHAR, seq BIGINT, target VARCHAR,
        kind VARCHAR, t_start DOUBLE, t_end DOUBLE, pid BIGINT, lost BIGINT);
    INSERT INTO bbv_vectors SELECT nextval('bbv_vector_ids'), * FROM (SELECT DISTINCT node, boot, seq, target,
        kind, t_start, t_end, pid, lost FROM bbv ORDER BY t_start, node, boot, seq);
    CREATE TABLE bbv_counts (vector_id BIGINT, key_id INTEGER, count BIGINT);
    INSERT INTO bbv_counts SELECT v.vector_id, k.key_id, o.count FROM bbv o
        JOIN bbv_vectors v ON v.node IS NOT DISTINCT FROM o.node AND v.boot IS NOT DISTINCT FROM o.boot
            AND v.seq IS NOT DISTINCT FROM o.seq AND v.target IS NOT DISTINCT FROM o.target
            AND v.kind IS NOT DISTINCT FROM o.kind AND v.t_start IS NOT DISTINCT FROM o.t_start
            AND v.t_end IS NOT DISTINCT FROM o.t_end AND v.pid IS NOT DISTINCT FROM o.pid
            AND v.lost IS NOT DISTINCT FROM o.lost
        JOIN bbv_keys k ON k.target IS NOT DISTINCT FROM o.target AND k.key IS NOT DISTINCT FROM o.key
        ORDER BY v.vector_id;
    DROP TABLE bbv;
    """),
    # The Parquet lake's catalog (daemon/store/lake.py): a file counts from the transaction listing it.
    (7, """
    CREATE TABLE lake_files (path VARCHAR PRIMARY KEY, tbl VARCHAR, day DATE, rows BIGINT, bytes BIGINT,
        ts_min BIGINT, ts_max BIGINT, written DOUBLE);
    """),
    # Per (node, boot), the highest seq whose ingest_log row retention trimmed: a resend at or below it
    # was stored long ago (else a resend after the trim would be stored twice).
    (8, "CREATE TABLE ingest_trimmed (node VARCHAR, boot VARCHAR, seq BIGINT, PRIMARY KEY (node, boot))"),
    # Why a node's probe failed (its prediction's columns NULL then): rank and `probe status` name it.
    (9, "ALTER TABLE probe_results ADD COLUMN error VARCHAR"),
    # Each node collector's interval and state at the agent's start, from its hello (`causewatch nodes`).
    (10, "ALTER TABLE nodes ADD COLUMN collectors JSON"),
    # The units an agent follows (jobs, steps, services, containers, pods): a row per (node, unit, start),
    # written at its start, updated by its changes, closed with its totals at its end, so a finished job's
    # summary outlives its samples (retention: retain_units_days from its end).
    (11, """
    CREATE TABLE units (node VARCHAR, unit VARCHAR, started DOUBLE, kind VARCHAR, ended DOUBLE, parent VARCHAR,
        job_id VARCHAR, step VARCHAR, uid BIGINT, user VARCHAR, job_name VARCHAR, cpus DOUBLE, cpuset VARCHAR,
        memory_bytes BIGINT, gpus BIGINT, cgroup VARCHAR, source VARCHAR, counted JSON, totals JSON, extra JSON,
        updated DOUBLE, PRIMARY KEY (node, unit, started));
    """),
    # Each lake file's layout (store.views.NAMES, IDS): the files written so far name their series only.
    (12, "ALTER TABLE lake_files ADD COLUMN layout INTEGER DEFAULT 1"),
    # A unit's samples summed up before retention deletes them (per metric its newest value and its
    # highest, as JSON): a job's report reads these once its samples are gone; they go with its units rows.
    (13, """
    CREATE TABLE unit_summaries (node VARCHAR, unit VARCHAR, figures JSON, kept DOUBLE, PRIMARY KEY (node, unit));
    """),
]


# Which migrations a store has had: created by `migrate` before the first of them.
VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, applied DOUBLE)"


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Bring the schema up to the newest migration; return the version now in force."""
    con.execute(VERSION_TABLE)
    current = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
    for version, sql in MIGRATIONS:
        if version > current:
            con.begin()
            con.execute(sql)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, time.time()])
            con.commit()
            current = version
    return current


_DDL = re.compile(r"\b(CREATE|DROP)\s+TABLE\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(\w+)", re.IGNORECASE)


def _created_tables(statements: list[str]) -> tuple[str, ...]:
    """The base tables that `statements` leave, in the order they were last created. Only CREATE TABLE
    and DROP TABLE are read (views and sequences are not tables): a migration that renames a table must
    teach this (a test compares the result with a migrated file's tables)."""
    tables: list[str] = []
    for sql in statements:
        for verb, name in _DDL.findall(sql):
            if name in tables:
                tables.remove(name)
            if verb.upper() == "CREATE":
                tables.append(name)
    return tuple(tables)


# Every base table of a migrated store, then every view of an opened one: what /api/stats counts and
# what the SQL wall test guards. Writes go to BASE_TABLES; readers name views where there is one.
BASE_TABLES = _created_tables([VERSION_TABLE, *(sql for _, sql in MIGRATIONS)])
TABLES = BASE_TABLES + VIEWS

"""What the store holds at a glance: rows per table (/api/stats), the nodes heard from, and what
the demo reports (live counts while it runs, then its overview with the newest model's edges)."""

from __future__ import annotations

import json

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import samples, shared
from causewatch.daemon.store.schema import TABLES


def table_counts(con: Cursor) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def nodes(con: Cursor) -> list[dict]:
    """The nodes heard from, with their agent's node collectors at its start ({name: {interval, state}})."""
    rows = shared.records(con.execute("SELECT * EXCLUDE (counters, extra) FROM nodes ORDER BY node"))
    return [dict(r, collectors=json.loads(r["collectors"] or "{}")) for r in rows]


LIVE_COUNTS = {"frames": "SELECT count(*) FROM ingest_log", "sample rows": "SELECT count(*) FROM samples",
               "metrics": "SELECT count(DISTINCT metric) FROM samples",
               "phase vectors": "SELECT count(DISTINCT (node, boot, seq)) FROM bbv",
               "tasks": "SELECT count(*) FROM tasks", "regions": "SELECT count(*) FROM regions"}


def live_counts(con: Cursor) -> dict[str, int]:
    return {name: con.execute(sql).fetchone()[0] for name, sql in LIVE_COUNTS.items()}


# The newest model's edges, each with how many of its scope's versions hold the pair (either way round):
# an edge most versions hold is stable; one that comes and goes is near the test's threshold.
NEWEST_EDGES = """
    WITH newest AS (SELECT model_id, scope FROM models ORDER BY model_id DESC LIMIT 1),
         versions AS (SELECT m.model_id FROM models m JOIN newest n USING (scope)),
         held AS (SELECT least(src, dst) a, greatest(src, dst) b, count(DISTINCT model_id) n FROM edges
                  WHERE model_id IN (SELECT model_id FROM versions) GROUP BY ALL)
    SELECT e.src, e.dst, round(e.strength, 3) strength_bits, e.directed, h.n held_by,
           (SELECT count(*) FROM versions) versions
    FROM edges e JOIN held h ON h.a = least(e.src, e.dst) AND h.b = greatest(e.src, e.dst)
    WHERE e.model_id = (SELECT model_id FROM newest) ORDER BY e.strength DESC, e.src, e.dst"""


def overview(con: Cursor) -> dict:
    """Everything the demo's report shows: ingest figures, then each analysis' latest output."""
    rows = lambda sql: shared.records(con.execute(sql))   # noqa: E731
    return {
        "frames_by_type": {r["type"]: r["n"] for r in rows("SELECT type, count(*) n FROM ingest_log GROUP BY type")},
        "sample_values": con.execute("SELECT count(*) FROM samples").fetchone()[0],
        "store_tiers": samples.tiers(con),
        "rows_per_metric": {f'{r["scope"]}/{r["metric"]}': r["n"] for r in rows(
            "SELECT scope, metric, count(*) n FROM samples GROUP BY ALL ORDER BY scope, metric")},
        "nodes": [dict(r, counters=_availability(r["counters"])) for r in rows(
            "SELECT node, hostname, cores, counters FROM nodes ORDER BY node")],
        "phase_vectors": rows("SELECT kind, count(DISTINCT (node, boot, seq)) vectors, count(DISTINCT key) functions "
                              "FROM bbv GROUP BY kind ORDER BY kind"),
        "top_functions": rows("SELECT key, sum(count) samples FROM bbv GROUP BY key "
                              "ORDER BY samples DESC, key LIMIT 5"),
        "tasks": rows("SELECT app, count(*) tasks, round(avg(duration), 4) mean_seconds FROM tasks "
                      "GROUP BY app ORDER BY app"),
        "causal_edges": rows(NEWEST_EDGES),
        "causal_submodels": [{"variable": v, **sub} for v, sub in latest_submodels(con).items()],
        "anomalies": rows("SELECT scope, kind, src, dst, round(score, 3) score, round(threshold, 3) threshold, "
                          "CASE WHEN resolved IS NULL THEN 'open' ELSE 'resolved' END state "
                          "FROM anomalies ORDER BY opened DESC, anomaly_id DESC LIMIT 5"),
        "bottlenecks": rows("SELECT node, region, metric, term, round(degree, 3) degree FROM scores "
                            "WHERE ts = (SELECT max(ts) FROM scores) "
                            "ORDER BY severity DESC, node, region, metric, term LIMIT 8"),
    }


def _availability(counters_json: str | None) -> dict:
    """hello's {event: "ok" | reason} as {"ok": n, reason: n, ...}."""
    counts: dict[str, int] = {}
    for state in json.loads(counters_json or "{}").values():
        counts[state] = counts.get(state, 0) + 1
    return counts


def latest_submodels(con: Cursor) -> dict:
    """The newest model's MDL submodels ({variable: {kind, formula, bits}})."""
    row = con.execute("SELECT graph->'submodels' FROM models ORDER BY model_id DESC LIMIT 1").fetchone()
    return json.loads(row[0]) if row and row[0] else {}

"""What the analyses write: model versions and their edges, baselines, anomalies, fuzzy scores,
probe kits and the node facts a probe result was taken under. Jobs hand these to the writer thread
(ctx.write), which runs each inside its transaction."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pyarrow as pa

from causewatch.daemon.store import columns

# The facts of a node that a probe result depends on, as one JSON object from a `nodes` row aliased n:
# the machine's boot (the agent's hello carries /proc/sys/kernel/random/boot_id) and its hardware.
NODE_FACTS_SQL = ("json_object('boot_id', n.extra->>'$.boot_id', 'cpu_model', n.cpu_model, "
                  "'cores', n.cores, 'memory_bytes', n.memory_bytes)")


def hello_facts(body: dict) -> dict:
    """NODE_FACTS_SQL's facts from a hello's body, as its nodes row gives them once stored: what a job
    judges one hello by when later hellos of the node may already have replaced the row."""
    boot_id = (body.get("extra") or {}).get("boot_id")
    return {"boot_id": None if boot_id is None else str(boot_id), "cpu_model": body.get("cpu_model"),
            "cores": body.get("cores"), "memory_bytes": body.get("memory_bytes")}


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows) -> None:
    """Append rows (an Arrow table, or a DataFrame) whose columns are a subset of `table`'s, named alike."""
    con.register("analysis_batch", rows)
    try:
        columns = [d[0] for d in con.execute("SELECT * FROM analysis_batch LIMIT 0").description]
        con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT * FROM analysis_batch")
    finally:
        con.unregister("analysis_batch")


def insert_model(con: duckdb.DuckDBPyConnection, scope: str, window: tuple[float, float], n_rows: int,
                 learned_at: float, graph: dict, edges: pa.Table) -> int:
    """A new `models` version with its `edges` rows (without model_id); returns its id."""
    model_id = con.execute("SELECT coalesce(max(model_id), 0) + 1 FROM models").fetchone()[0]
    con.execute("INSERT INTO models VALUES (?, ?, ?, ?, ?, ?, ?)",
                [model_id, scope, window[0], window[1], n_rows, learned_at, json.dumps(graph)])
    if len(edges):
        ids = columns.numbers(np.full(len(edges), model_id, np.int64))   # runs in the daemon: no pa.array
        insert_rows(con, "edges", edges.append_column("model_id", ids))
    return model_id


def set_baseline(con: duckdb.DuckDBPyConnection, scope: str, model_id: int, how: str, now: float) -> None:
    """Make model `model_id` the baseline of `scope` (`how`: 'pinned' or the rule's, analytics.causal.baseline)."""
    con.execute("INSERT INTO baselines VALUES (?, ?, ?, ?) ON CONFLICT (scope) DO UPDATE SET "
                "model_id = excluded.model_id, chosen = excluded.chosen, how = excluded.how",
                [scope, model_id, now, how])


def raise_anomaly(con: duckdb.DuckDBPyConnection, row: dict) -> int:
    """A new open anomaly (row: scope, kind, src, dst, opened, baseline_id, model_id, score, threshold,
    evidence); returns its id."""
    anomaly_id = con.execute("SELECT coalesce(max(anomaly_id), 0) + 1 FROM anomalies").fetchone()[0]
    con.execute("INSERT INTO anomalies VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?)",
                [anomaly_id, row["scope"], row["kind"], row["src"], row["dst"], row["opened"], row["opened"],
                 row["baseline_id"], row["model_id"], row["score"], row["threshold"], json.dumps(row["evidence"])])
    return anomaly_id


def update_anomaly(con: duckdb.DuckDBPyConnection, anomaly_id: int, now: float, model_id: int | None,
                   score: float, threshold: float, evidence: dict) -> None:
    con.execute("UPDATE anomalies SET updated = ?, model_id = coalesce(?, model_id), score = ?, threshold = ?, "
                "evidence = ? WHERE anomaly_id = ?",
                [now, model_id, score, threshold, json.dumps(evidence), anomaly_id])


def resolve_anomaly(con: duckdb.DuckDBPyConnection, anomaly_id: int, now: float, reason: str | None = None) -> None:
    """Resolved at `now`; a `reason` other than "no longer found" goes into its evidence (`resolved_because`)."""
    sets, params = "resolved = ?, updated = ?", [now, now]
    if reason is not None:
        sets += ", evidence = json_merge_patch(coalesce(evidence, '{}'), ?)"
        params.append(json.dumps({"resolved_because": reason}))
    con.execute(f"UPDATE anomalies SET {sets} WHERE anomaly_id = ?", [*params, anomaly_id])


def record_anomalies(con: duckdb.DuckDBPyConnection, raised: list[dict], updated: list[tuple], resolved: list[int],
                     now: float, reason: str | None = None) -> list[int]:
    """One evaluation's anomaly changes in one transaction: `raised` rows (raise_anomaly's), `updated`
    as update_anomaly's arguments after `now`, `resolved` ids (each with `reason`, if one is given).
    Returns the raised ones' ids in order."""
    for args in updated:
        update_anomaly(con, args[0], now, *args[1:])
    for anomaly_id in resolved:
        resolve_anomaly(con, anomaly_id, now, reason)
    return [raise_anomaly(con, row) for row in raised]


def record_probe_facts(con: duckdb.DuckDBPyConnection) -> None:
    """Give each new probe result the facts of the hello its agent run sent (same node and boot):
    after that hello is stored, so a hello and a result in one batch work too."""
    con.execute(f"""UPDATE probe_results p SET facts = {NODE_FACTS_SQL} FROM nodes n
                    WHERE p.facts IS NULL AND p.node = n.node AND p.boot = n.boot""")


def register_kit(con: duckdb.DuckDBPyConnection, row: dict) -> None:
    """Insert or replace (app, kit) in probe_kits (row from probe.registry.kit_row)."""
    con.execute("DELETE FROM probe_kits WHERE app = ? AND kit = ?", [row["app"], row["kit"]])
    con.execute("INSERT INTO probe_kits VALUES (?, ?, ?, ?, ?)",
                [row["app"], row["kit"], row["path"], row["manifest"], row["registered"]])


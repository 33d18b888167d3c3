"""The causal models as stored: versions per scope with their graphs and windows, each scope's
baseline, and the dependency anomalies found against it."""

from __future__ import annotations

import json

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.readers import shared
from causewatch.errors import InputError, NotFoundError

# a scope asked for: any (NULL), that one, or with `job:ID` every scope of that Slurm job's tasks
_SCOPE = "(? IS NULL OR scope = ? OR ends_with(scope, '@' || ?) AND scope LIKE '%@job:%')"


def model_scopes(con: Cursor) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT scope FROM models ORDER BY scope").fetchall()]


def models(con: Cursor, scope: str | None = None) -> list[dict]:
    """Model versions (of `scope`, or of a Slurm job's, `job:ID`), newest first: model_id, scope, window,
    rows, when, edge count, baseline or not."""
    return shared.records(con.execute(f"""
        SELECT m.model_id, m.scope, m.window_start, m.window_end, m.n_rows, m.learned_at,
               (SELECT count(*) FROM edges e WHERE e.model_id = m.model_id) AS edges,
               b.model_id IS NOT NULL AS baseline
        FROM models m LEFT JOIN baselines b ON b.scope = m.scope AND b.model_id = m.model_id
        WHERE {_SCOPE.replace("scope", "m.scope")} ORDER BY m.model_id DESC""", [scope, scope, scope]))


def model_graph(con: Cursor, scope: str, model_id: int | None = None) -> tuple[int, dict] | None:
    """(model_id, graph JSON as a dict) of `scope`'s newest model, or of version `model_id`."""
    row = con.execute("SELECT model_id, graph FROM models WHERE scope = ? AND (? IS NULL OR model_id = ?) "
                      "ORDER BY model_id DESC LIMIT 1", [scope, model_id, model_id]).fetchone()
    return None if row is None else (row[0], json.loads(row[1]))


def model_window(con: Cursor, model_id: int) -> tuple[float, float]:
    """(window_start, window_end): the first and last task start a model version was learnt from."""
    return con.execute("SELECT window_start, window_end FROM models WHERE model_id = ?", [model_id]).fetchone()


def model_record(con: Cursor, scope: str | None = None, model_id: int | None = None) -> dict:
    """{scope, model_id, baseline, **graph} of `scope`'s newest model or version `model_id`; without a
    scope, the only one there is (several: an InputError naming them). No model there (yet) is a
    NotFoundError naming the scopes that have one."""
    scopes = model_scopes(con)
    if not scopes:
        raise NotFoundError("no model learnt yet (the causal job learns one per app once its tasks arrive)")
    if scope is None:
        if len(scopes) != 1:
            raise InputError(f"scope: give one of {', '.join(scopes)}")
        scope = scopes[0]
    found = model_graph(con, scope, model_id)
    if found is None:
        raise NotFoundError(f"scope {scope!r} has no model" + (f" {model_id}" if model_id is not None else "")
                            + f" (scopes with models: {', '.join(scopes)})")
    chosen = baseline(con, scope)
    # what the baseline rule waits for, as the job judged the newest version (None once there is one)
    waits = None if chosen else (found[1].get("baseline_rule") or {}).get(
        "waiting_for", "the causal job's next model version (it judges each against the baseline rule)")
    return {"scope": scope, "model_id": found[0], "baseline": chosen, "baseline_waits_for": waits, **found[1]}


def baseline(con: Cursor, scope: str) -> dict | None:
    """{model_id, chosen, how} of `scope`'s baseline, or None while it has none."""
    rows = shared.records(con.execute("SELECT model_id, chosen, how FROM baselines WHERE scope = ?", [scope]))
    return rows[0] if rows else None


def anomalies(con: Cursor, scope: str | None = None, open_only: bool = False, limit: int = 200) -> list[dict]:
    """Anomalies (of `scope`, or of a Slurm job's, `job:ID`) newest first (open ones have resolved = None),
    evidence decoded."""
    rows = shared.records(con.execute(f"""
        SELECT anomaly_id, scope, kind, src, dst, opened, updated, resolved, baseline_id, model_id, score,
               threshold, evidence
        FROM anomalies WHERE {_SCOPE} AND (NOT ? OR resolved IS NULL)
        ORDER BY opened DESC, anomaly_id DESC LIMIT ?""", [scope, scope, scope, open_only, limit]))
    for row in rows:
        row["evidence"] = json.loads(row["evidence"]) if row["evidence"] else {}
    return rows


def recent_versions(con: Cursor, scope: str, n: int, min_rows: int) -> tuple[list[tuple[int, int, list]], int]:
    """`scope`'s newest `n` versions, oldest first, as (model_id, n_rows, [(src, dst), …]), and how many
    versions learnt from `min_rows` rows at least it has in all (the baseline rule's input)."""
    rows = con.execute("""
        SELECT m.model_id, m.n_rows, list(e.src ORDER BY e.src, e.dst), list(e.dst ORDER BY e.src, e.dst)
        FROM (SELECT model_id, n_rows FROM models WHERE scope = ? ORDER BY model_id DESC LIMIT ?) m
        LEFT JOIN edges e ON e.model_id = m.model_id
        GROUP BY m.model_id, m.n_rows ORDER BY m.model_id""", [scope, n]).fetchall()
    total = con.execute("SELECT count(*) FROM models WHERE scope = ? AND n_rows >= ?", [scope, min_rows]).fetchone()[0]
    return [(m, r, [(s, d) for s, d in zip(srcs, dsts) if s is not None]) for m, r, srcs, dsts in rows], total

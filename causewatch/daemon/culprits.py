"""An open anomaly's candidate causes, ranked: analytics.rca.rank_causes over the units the daemon knows
at the time (daemon/culprit_units.py), the baseline model's window against the incident's, the anomaly's
variable as the symptom (`symptom`: where a unit beside the app's measures its kind), what is known of
how a fault travels between the units as the graph, and the units beside the app's counted by what they
took more of (`contention`).

The incident spans the task rows the anomaly was raised on that started after the baseline's window (at
least MIN_SPAN seconds back from the last; on to the check, TAIL seconds at most), in INCIDENT_ROWS rows
of MIN_WIDTH to MAX_WIDTH seconds, from a row, or LEAD seconds, before them: the ranking measures every
change from the incident's first row when the symptom's is calmer (its change starts inside the window),
and a cause whose first row already holds the fault (it steps up with the first judged row, or an agent's
look averages it over its interval) would have no change left to show. The baseline is the end of the
baseline model's window, at most BASELINE_ROWS rows of that width. The evidence keeps the TOP best
(`causes`: unit, score, evidence in at most EVIDENCE_CHARS characters) and how they were ranked
(`causes_ranked`: the windows, the units, the nodes, or why nothing was); `label` is the best unit, in
at most LABEL_CHARS characters, as the exported series and the page carry it.
"""

from __future__ import annotations

import logging

from causewatch.analytics.rca import CallGraph, RCAError, column_kind, rank_causes
from causewatch.daemon import culprit_units
from causewatch.daemon.culprit_units import Table, Windows

log = logging.getLogger("causewatch.daemon.culprits")

TOP = 5
EVIDENCE_CHARS, UNIT_CHARS, LABEL_CHARS = 400, 160, 100
MIN_SPAN = 5.0          # seconds an incident spans at least: a few rows of the agents' 1 s samples
INCIDENT_ROWS = 16      # rows the incident is cut in (the ranking judges a change on a third of them)
MIN_WIDTH, MAX_WIDTH = 1.0, 60.0
LEAD = 5.0              # seconds the incident starts before the judged rows at least: a look at the busiest
                        # processes averages the seconds since the one before, and a judged batch may
                        # start a little before the fault
TAIL = 5.0              # seconds past the last judged start the incident may go on to the check: the tasks
                        # ran and reached the daemon meanwhile, and the nodes' samples show the fault
BASELINE_ROWS = 120
NONE = "none beyond the cut"   # the label when no unit changed enough to count as anomalous
UNRANKED = "not ranked"        # ...and when there was nothing to rank (the evidence says why)


def windows(baseline: tuple[float, float] | None, judged: dict, now: float | None = None) -> Windows | None:
    """The windows around rows judged {first_start, last_start} against the baseline's window, up to
    `now` at most TAIL seconds after their last start; None when the baseline's window is unknown or
    leaves no row before the incident."""
    if baseline is None:
        return None
    end = float(judged["last_start"])
    end = end if now is None else max(end, min(now, end + TAIL))
    start = min(max(float(judged["first_start"]), baseline[1]), end - MIN_SPAN)
    width = min(MAX_WIDTH, max(MIN_WIDTH, (end - start) / INCIDENT_ROWS))
    start -= max(width, LEAD)
    base_end = min(baseline[1], start)
    base_start = max(baseline[0], base_end - BASELINE_ROWS * width)
    return Windows((base_start, base_end), (start, end), width) if base_end - base_start >= width else None


def rank(cur, scope: str, model, variable: str, around: Windows | None, tables: dict | None = None) -> dict:
    """{causes, causes_ranked} of an anomaly on `variable` of app `scope` (its baseline `model`, a
    CausalModel); `tables` keeps the units read per windows, for the anomalies of one evaluation. A
    ranking that fails costs the anomaly its causes, never its opening (the log has the traceback)."""
    if around is None:
        return {"causes": [], "causes_ranked": {"why": "no baseline window before the incident (or its model is gone)"}}
    tables = {} if tables is None else tables
    try:
        if around not in tables:
            tables[around] = culprit_units.read(cur, scope, model, around)
        return ranked(tables[around], scope, variable, around)
    except RCAError as e:
        return {"causes": [], "causes_ranked": {**around.to_dict(), "why": str(e)}}
    except Exception as e:   # a bug here must not keep an anomaly from opening
        log.warning("anomaly causes of %s %s not ranked", scope, variable, exc_info=True)
        return {"causes": [], "causes_ranked": {**around.to_dict(), "why": f"{type(e).__name__}: {e}"[:200]}}


def ranked(table: Table, scope: str, variable: str, around: Windows) -> dict:
    """rank_causes on a table's rows: the baseline's (row numbers below 0) against the incident's, the
    units beside the app's taken as `contention` says."""
    rows = table.rows
    base = rows[rows.index < 0]
    causes = rank_causes(base, contention(table, base, rows[rows.index >= 0]), units=table.units,
                         target=symptom(table, variable), graph=CallGraph(table.edges))
    return {"causes": [{"unit": c.unit[:UNIT_CHARS], "score": round(c.score, 3),
                        "evidence": c.evidence[:EVIDENCE_CHARS]} for c in causes[:TOP]],
            "causes_ranked": {**around.to_dict(), "units": len(table.units), "nodes": table.nodes}}


def contention(table: Table, base, incident):
    """The incident's rows with each unit beside the app's (a node's, another process, a watched scope)
    at least at its baseline median: they are candidates through contention, what they take more of the
    app gets less of; a neighbour that took less either left the app more or lost to the same contention
    (the app's own command, starved by a hog, fell with it) and is no cause of the anomaly."""
    beside = [c for u, cols in table.units.items() if u not in table.app_units for c in cols]
    return incident.assign(**{c: incident[c].clip(lower=base[c].median()) for c in beside if base[c].notna().any()})


def symptom(table: Table, variable: str) -> str | None:
    """The anomaly's variable as the ranking's target where a unit beside the app's measures the same kind
    of thing (the first word of a column's kind: `cpu_wait_seconds` and `cpu_cores`): the target weighs
    other kinds down (to a fifth), which among the app's own latencies points at the slow part, but would
    hide a neighbour's CPU behind a task time that rose. Otherwise None: no kind is preferred."""
    if variable not in table.rows.columns:
        return None
    beside = {column_kind(c, u).split("_")[0] for u, cols in table.units.items() if u not in table.app_units
              for c in cols}
    return variable if variable.split("_")[0] in beside else None


def label(causes: list[dict]) -> str:
    """The best cause as a label: its unit, NONE when none counts as anomalous (a score below 1), or
    UNRANKED."""
    if not causes:
        return UNRANKED
    return causes[0]["unit"][:LABEL_CHARS] if causes[0]["score"] >= 1 else NONE

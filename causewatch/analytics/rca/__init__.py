"""Root-cause ranking on two windows: which unit (a service, a node, a process) a performance change
started at, from a calm baseline window and an incident window of the same columns.

Every name below imports from here (`from causewatch.analytics.rca import rank_causes`).

    rank_causes — the candidate units best first, each with a score and its evidence in words
    Cause — one ranked unit: name, score, evidence and the figures behind them
    CallGraph — who calls whom between units (background knowledge), with ancestors and descendants
    Deviation — a column's robust change between the windows
    deviations — the robust change of every column of the two windows
    column_kind — the metric kind of a column, its name without the unit's
    RCAError — input the ranking cannot use (an unknown target, an empty window, disagreeing columns)
    CUT — the robust deviation at which a unit counts as anomalous (score 1)

The other modules are internal: hypotheses (each unit as the origin, on a call graph), echoes (echoes
read off the data where no graph is given), levels (a change every unit of a kind shares, taken out),
evidence (the sentences).
"""

from causewatch.analytics._lazy import attach

__getattr__, __dir__, __all__ = attach(__name__, {
    "rank_causes": "ranking", "Cause": "ranking", "RCAError": "deviation", "CUT": "deviation",
    "CallGraph": "graph", "Deviation": "deviation", "deviations": "deviation", "column_kind": "deviation",
})

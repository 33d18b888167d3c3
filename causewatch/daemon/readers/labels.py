"""The stored series' labels, as Prometheus' label and series APIs name them (`/api/v1/labels`,
`/api/v1/label/NAME/values`, `/api/v1/series`): read off the `series` table, a row per series."""

from __future__ import annotations

from causewatch.daemon.cursor import Cursor
from causewatch.daemon.promql import LABEL_NAMES as LABELS  # Prometheus' name: our column
from causewatch.daemon.readers.ranges import matching


def _any(selectors: list[list[tuple]]) -> tuple[str, list]:
    """The WHERE clause of series any selector (matchers, all of which hold) picks; none: every series."""
    if not selectors:
        return "TRUE", []
    clauses, params = [], []
    for matchers in selectors:
        where, more = matching(matchers)
        clauses.append(f"({where})")
        params += more
    return " OR ".join(clauses), params


def names(con: Cursor, selectors: list[list[tuple]]) -> list[str]:
    """The label names the selected series carry (every series carries all of LABELS), sorted."""
    where, params = _any(selectors)
    found = con.execute(f"SELECT count(*) > 0 FROM series WHERE {where}", params).fetchall()[0][0]
    return sorted(LABELS) if found else []


def values(con: Cursor, label: str, selectors: list[list[tuple]]) -> list[str]:
    """A label's values among the selected series, sorted; none for a label no series carries."""
    if label not in LABELS:
        return []
    where, params = _any(selectors)
    column = LABELS[label]   # one of LABELS' columns, not the caller's text
    return [v for (v,) in con.execute(f"SELECT DISTINCT {column} FROM series WHERE {where} ORDER BY 1",
                                      params).fetchall()]


def label_sets(con: Cursor, selectors: list[list[tuple]]) -> list[dict[str, str]]:
    """Each selected series' labels by Prometheus' names, sorted by them."""
    where, params = _any(selectors)
    rows = con.execute(f"SELECT metric, node, scope FROM series WHERE {where} ORDER BY metric, node, scope",
                       params).fetchall()
    return [{"__name__": m, "node": n, "scope": s} for m, n, s in rows]

"""Phase vectors as stored: which targets and kinds of BBV there are, and one's vectors in their
long form (a row per vector and key), for the phases command and /api/bbv."""

from __future__ import annotations

import pandas as pd

from causewatch.daemon.cursor import Cursor

# The columns that name one vector (its rows share them; `analytics.phases.keyed.bbv_matrix` makes each a row).
BBV_IDENT = ["node", "boot", "seq", "target", "kind", "t_start", "t_end"]


def bbv_targets(con: Cursor, limit: int | None = None) -> pd.DataFrame:
    """(target, kind, vectors) of every vector kind stored, most vectors first; the first `limit`
    (all: None)."""
    return con.execute("SELECT target, kind, count(DISTINCT (node, boot, seq)) AS vectors FROM bbv "
                       "GROUP BY ALL ORDER BY vectors DESC, target, kind LIMIT ?", [limit]).df()


def bbv_rows(con: Cursor, target: str, kind: str) -> pd.DataFrame:
    """The stored vectors of one target and kind in their long form (a row per vector and key),
    oldest vector first, each vector's keys sorted (the order they came in is not kept: `bbv` is a
    join of the vectors, their counts and the key dictionary, and its key ids depend on the store)."""
    return con.execute(f"SELECT {', '.join(BBV_IDENT)}, key, count FROM bbv WHERE target = ? AND kind = ? "
                       "ORDER BY t_start, node, boot, seq, key", [target, kind]).df()

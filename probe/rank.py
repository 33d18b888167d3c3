"""Rank nodes for an application by the task time their latest probe predicts.

Takes each node's newest probe result (read by the daemon's `tables.latest_probes`), fastest first.
"""

from __future__ import annotations


def rank_nodes(app: str, latest: list[dict]) -> list[dict]:
    """`latest` (one row per node: node, kit, ts, predicted_seconds, lo, hi, ratio, probe_seconds,
    phases) ordered fastest first, numbered from 1, with the app named on each row."""
    ordered = sorted(latest, key=lambda r: (r["predicted_seconds"], r["node"]))
    return [{"rank": i, "node": r["node"], "app": app, **{k: v for k, v in r.items() if k != "node"}}
            for i, r in enumerate(ordered, 1)]

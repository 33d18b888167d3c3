"""Daemon analysis job: fuzzy bottleneck severity of every node's region summaries (instrumented
regions and sampled BBV functions), stored in `scores` and exported as a gauge per region and metric.
"""

from __future__ import annotations

import time

from causewatch.analytics.fuzzy.perfql import find_bottlenecks
from causewatch.analytics.regions import region_summaries
from causewatch.analytics.fuzzy.terms import load_terms

GAUGE = "causewatch_bottleneck_severity"
HELP = ("Fuzzy bottleneck severity of a code region for a metric: degree of the most severe term "
        "times its level k/K (0 = only near the threshold)")
COLUMNS = ["ts", "node", "app", "region", "source", "metric", "value", "term", "degree", "severity"]


class Job:
    name = "fuzzy"
    interval = 30.0

    def __init__(self, window: float = 600.0, mode: str = "compatible", terms: str | None = None,
                 clock=time.time):
        self.window, self.mode, self.clock = window, mode, clock
        self.termsets = load_terms(terms)

    @classmethod
    def from_config(cls, cfg) -> "Job":
        return cls(terms=cfg.fuzzy_terms)

    def run(self, ctx) -> None:
        now = self.clock()
        cur = ctx.read()
        try:
            frame = region_summaries(cur, since=now - self.window)
        finally:
            cur.close()
        found = find_bottlenecks(frame, self.termsets, mode=self.mode).assign(ts=now)[COLUMNS]
        if len(found):
            ctx.write(lambda con: _insert(con, found))
        ctx.metrics.clear(GAUGE)
        worst = found.groupby(["node", "region", "metric"], sort=False)["severity"].max()
        for (node, region, metric), severity in worst.items():
            ctx.metrics.set_gauge(GAUGE, HELP, {"node": node, "region": region, "metric": metric}, float(severity))


def _insert(con, rows) -> None:
    con.register("fuzzy_scores_batch", rows)
    try:
        con.execute(f"INSERT INTO scores ({', '.join(COLUMNS)}) SELECT * FROM fuzzy_scores_batch")
    finally:
        con.unregister("fuzzy_scores_batch")

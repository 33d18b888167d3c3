"""Daemon analysis job: fuzzy bottleneck severity of every node's region summaries (instrumented
regions and sampled BBV functions), stored in `scores` and exported as a gauge per region and metric.
"""

from __future__ import annotations

import functools
import time

import pyarrow as pa

from causewatch.analytics.fuzzy import TermSet, find_bottlenecks
from causewatch.daemon import readers, store
from causewatch.daemon.exporter import gauge_family
from causewatch.daemon.jobs import Job, JobContext

GAUGE = "causewatch_bottleneck_severity"
HELP = ("Fuzzy bottleneck severity of a code region for a metric: degree of the most severe term "
        "times its level k/K (0 = only near the threshold)")
LABELS = ["node", "app", "region", "metric"]
COLUMNS = ["ts", "node", "app", "region", "source", "metric", "value", "term", "degree", "severity"]


class FuzzyJob(Job):
    name = "fuzzy"

    def __init__(self, termsets: dict[str, TermSet] | None = None, window: float = 600.0,
                 mode: str = "compatible", clock=time.time, interval: float = 30.0):
        self.termsets, self.window, self.mode, self.clock = termsets, window, mode, clock
        self.interval = interval   # seconds between runs (the scheduler reads it)

    def run(self, ctx: JobContext) -> None:
        now = self.clock()
        with ctx.read() as cur:
            df = readers.regions.region_summaries(cur, since=now - self.window)
        found = find_bottlenecks(df, self.termsets, mode=self.mode).assign(ts=now)[COLUMNS]
        if len(found):
            ctx.write(functools.partial(store.results.insert_rows, table="scores",
                                        rows=pa.Table.from_pandas(found, preserve_index=False)))
        # by app too: apps that name a region alike (`render`) are apart in the scores, so also here
        worst = found.groupby(LABELS, sort=False)["severity"].max()
        series = [(dict(zip(LABELS, key)), s) for key, s in worst.items()]
        ctx.exporter.publish(self.name, [gauge_family(GAUGE, HELP, LABELS, series)])

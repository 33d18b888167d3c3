"""Daemon job: retention. Rolls raw samples up into per-minute aggregates (`samples_minute`) and deletes
rows past their table's window, copying them to Parquet first when an export folder is configured.

Raw samples go in whole minutes (the window's start rounded down to a minute), each minute's aggregate
recomputed from all its raw rows in the transaction that deletes them, so aggregates equal what the raw
rows gave. Rows that arrive after their minute's raw rows went are folded into its aggregate (merged).
"""

from __future__ import annotations

import functools
import math
import time

from causewatch.config import DaemonConfig
from causewatch.daemon import readers, store
from causewatch.daemon.exporter import gauge_family
from causewatch.daemon.jobs import Job, JobContext

DAY = 86400.0
MINUTE = 60.0
# Each roll-up redoes the ten minutes before the last one: rows a reconnecting agent resends land there.
LATE = 600.0
GAUGE = "causewatch_retention_deleted_rows"
HELP = "Rows the last retention run deleted, by table (copied to Parquet first when an export folder is set)"


def floor_minute(ts: float) -> float:
    return math.floor(ts / MINUTE) * MINUTE


def floor_day(ts: float) -> float:
    return math.floor(ts / DAY) * DAY


class RetentionJob(Job):
    """Windows in days (0 keeps a table forever); `export` a folder for Parquet copies ("" = none);
    `lake` the store's lake folder ("" = none), whose samples go a day at a time."""
    name = "retention"

    def __init__(self, samples_days: float = 14.0, bbv_days: float = 14.0, minute_days: float = 400.0,
                 units_days: float = 400.0, export: str = "", interval: float = 300.0, lake: str = "", clock=time.time):
        self.samples_days, self.bbv_days, self.minute_days = samples_days, bbv_days, minute_days
        self.units_days = units_days
        self.export, self.interval, self.lake, self.clock = export, interval, lake, clock
        self.rolled_to_: float | None = None    # minutes before this were rolled up by an earlier run
        self.finalised_: float | None = None    # raw samples before this were deleted: later ones are merged
        self.deleted_: dict[str, int] = {}

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> "RetentionJob":
        lake = store.lake.folder_for(cfg.db, cfg.store_lake, cfg.shard) if cfg.store_hot_seconds else None
        return cls(cfg.retain_samples_days, cfg.retain_bbv_days, cfg.retain_samples_minute_days,
                   cfg.retain_units_days, cfg.retention_export, cfg.retention_interval, str(lake or ""))

    def cutoffs(self, now: float) -> dict[str, float]:
        """Per table, the time before which its rows are deleted (tables kept forever are absent)."""
        out = {}
        if self.samples_days:
            # the lake drops whole days: with one, raw samples go a UTC day at a time
            out["samples"] = (floor_day if self.lake else floor_minute)(now - self.samples_days * DAY)
        if self.bbv_days:
            out["bbv"] = now - self.bbv_days * DAY
        if self.minute_days:
            out["samples_minute"] = now - self.minute_days * DAY
        if self.units_days:
            out["units"] = now - self.units_days * DAY
        return out

    def run(self, ctx: JobContext) -> None:
        now = self.clock()
        current, cut = floor_minute(now), self.cutoffs(now)
        with ctx.read() as cur:
            first, end = readers.samples.rollup_bounds(cur)
        first = None if first is None else floor_minute(first)
        if self.finalised_ is None:
            self.finalised_ = current if first is None else first
        resume = self.rolled_to_ if self.rolled_to_ is not None else end if end is not None else first
        lo = None if resume is None else max(resume - LATE, cut.get("samples", -math.inf))
        export = self.export or None

        # The log outlives the longest raw window: a frame resent within it is acked as a duplicate.
        log_cut = now - max(self.samples_days, self.bbv_days) * DAY if self.samples_days and self.bbv_days else None
        self.deleted_ = ctx.write(functools.partial(store.retention.retain, lo=lo, current=current, first=first,
                                                    finalised=self.finalised_, cut=cut, export=export,
                                                    log_cut=log_cut, lake=self.lake or None))
        self.rolled_to_ = current
        if "samples" in cut:
            self.finalised_ = max(self.finalised_, cut["samples"])
        ctx.exporter.publish(self.name, [gauge_family(GAUGE, HELP, ["table"],
                                                      [({"table": t}, n) for t, n in self.deleted_.items()])])

"""Daemon job: compaction. Moves samples older than the hot window from DuckDB into the Parquet lake
(daemon/store/lake.py), in whole chunks of time so the lake's files line up; merges each closed day's
files into one (sorted over the whole day, so its series' runs are long); gives the DuckDB file's free end
back after a move that emptied most of it (daemon/store/space.py); publishes how many values sit hot and
cold.

It runs every few minutes though the window moves by a chunk at a time: rows that arrive already older
than the window (an agent backfilling after an outage) then reach the lake within minutes.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from pathlib import Path

from causewatch.config import DaemonConfig
from causewatch.daemon import readers, store
from causewatch.daemon.exporter import gauge_family
from causewatch.daemon.jobs import Job, JobContext

log = logging.getLogger(__name__)
CHUNK = 600.0    # seconds: the cut moves in these steps, so a day holds 144 regular files at most


class CompactionJob(Job):
    """Moves samples with ts < now - hot_seconds (floored to a CHUNK) into the lake folder `lake`."""
    name = "compaction"

    def __init__(self, lake: str, hot_seconds: float = 3600.0, interval: float = 120.0, clock=time.time):
        self.lake, self.hot_seconds, self.interval, self.clock = lake, hot_seconds, interval, clock
        self.moved_: dict[str, int] = {}
        self.merged_: str | None = None     # the day the last run merged into one file
        self.packed_: dict | None = None    # the store file's blocks after the last pack (store.space)

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> CompactionJob | None:
        """The job for a configured store, or None where nothing moves (hot window 0, in-memory store)."""
        lake = store.lake.folder_for(cfg.db, cfg.store_lake, cfg.shard)
        if lake is None or not cfg.store_hot_seconds:
            return None
        return cls(str(lake), cfg.store_hot_seconds, cfg.compaction_interval)

    def cutoff(self, now: float) -> float:
        """Where this run cuts: now - hot window, floored to a CHUNK (to the window itself when shorter,
        as in the demo's seconds-long window)."""
        step = min(CHUNK, self.hot_seconds)
        return math.floor((now - self.hot_seconds) / step) * step

    def run(self, ctx: JobContext) -> None:
        cutoff = self.cutoff(self.clock())
        # the sort and write of each slice off the writer, which is held only to check, list and delete
        done = store.lake.move(self.lake, int(cutoff * 1000), ctx.read, ctx.read_at_store, ctx.write)
        if done["missing"]:
            log.error("lake files listed but missing (their rows are lost): %s", ", ".join(done["missing"]))
        self.moved_ = done["moved"]
        with ctx.read() as cur:
            days = readers.samples.lake_days_to_merge(cur, time.strftime("%Y-%m-%d", time.gmtime(cutoff)))
        self.merged_ = self.merge(ctx, *days[0]) if days else None
        # after the commits: a shard's manifest names only complete files whose rows are no longer hot
        ctx.write(functools.partial(store.lake.publish, lake=Path(self.lake)))
        if done["moved"] and ctx.write(store.space.pack):   # the file's free end given back
            self.packed_ = ctx.write(store.space.checkpoint)
            log.info("store file packed after the move: %d of %d blocks used", self.packed_["used"],
                     self.packed_["total"])
        with ctx.read() as cur:
            tiers = readers.samples.tiers(cur)
        ctx.exporter.publish(self.name, [
            gauge_family("causewatch_store_values", "Sample values stored, by tier (hot: DuckDB, cold: Parquet)",
                         ["tier"], [({"tier": t}, tiers[f"{t}_values"]) for t in ("hot", "cold")]),
            gauge_family("causewatch_store_lake_bytes", "Bytes of the Parquet lake's listed files", [],
                         [({}, tiers["cold_bytes"])]),
        ])

    def merge(self, ctx: JobContext, day: str, files: list[tuple[str, int]]) -> str | None:
        """Rewrite a closed day's files ((path, layout)) as one, in the lake's newest layout (one day a run
        bounds the work); the day, or None when the swap found the day changed meanwhile (the next run
        merges it again)."""
        paths = [f for f, _ in files]
        with ctx.read() as cur:
            series = readers.samples.series_to_name(cur, paths)
        staged, rows = store.lake.merge(self.lake, files, series=series)
        done = ctx.write(functools.partial(store.lake.swap, lake=self.lake, old=paths, staged=staged, rows=rows))
        return day if done else None

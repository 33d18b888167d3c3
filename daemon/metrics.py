"""The daemon's latest-state cache: everything /metrics exports, kept in memory.

Ingest counters are fixed; analysis jobs publish gauges by name through `set_gauge`/`clear`.
A scrape never touches DuckDB.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class LatestState:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.frames_received = Counter("causewatch_frames_received", "Frames decoded, by type", ["type"], registry=r)
        self.frames_stored = Counter("causewatch_frames_stored", "Frames committed to DuckDB, by type", ["type"],
                                     registry=r)
        self.frames_duplicate = Counter("causewatch_frames_duplicate", "Resent frames recognised as already stored",
                                        registry=r)
        self.frames_refused = Counter("causewatch_frames_refused", "Frames refused with a nack, by reason",
                                      ["reason"], registry=r)
        self.values_stored = Counter("causewatch_sample_values_stored", "Metric values committed", registry=r)
        self.store_errors = Counter("causewatch_store_errors", "Batches whose commit failed", registry=r)
        self.job_errors = Counter("causewatch_job_errors", "Analysis job runs that raised, by job", ["job"],
                                  registry=r)
        self.commit_seconds = Counter("causewatch_commit_seconds", "Time spent committing batches", registry=r)
        self._gauges: dict[str, Gauge] = {}
        self._lock = threading.Lock()

    def set_gauge(self, name: str, help: str, labels: dict[str, str], value: float) -> None:
        """Set one series of gauge `name` (created on first use with these label names)."""
        with self._lock:
            gauge = self._gauges.get(name)
            if gauge is None:
                gauge = self._gauges[name] = Gauge(name, help, sorted(labels), registry=self.registry)
        gauge.labels(**labels).set(value) if labels else gauge.set(value)

    def clear(self, name: str) -> None:
        """Drop every series of gauge `name` (a job republishing its full state calls this first)."""
        gauge = self._gauges.get(name)
        if gauge is not None:
            gauge.clear()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

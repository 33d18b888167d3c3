"""The daemon's exporter: everything /metrics serves, kept in memory (a scrape never touches DuckDB).

Ingest counters are fixed series; each analysis job publishes its gauges as one snapshot, swapped in
whole at the end of its run by a custom collector, so a scrape never sees a half-updated set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric


def gauge_family(name: str, help: str, labels: Sequence[str],
                 series: Iterable[tuple[Mapping[str, str], float]]) -> GaugeMetricFamily:
    """A gauge with one sample per (label values by name, value)."""
    family = GaugeMetricFamily(name, help, labels=list(labels))
    for values, value in series:
        family.add_metric([str(values[k]) for k in labels], float(value))
    return family


class Snapshots:
    """A client_python custom collector: per publisher, the families of its latest complete run."""

    def __init__(self):
        self._families: dict[str, tuple[Metric, ...]] = {}

    def publish(self, publisher: str, families: Iterable[Metric]) -> None:
        # A new dict replaces the old one in a single assignment: collect() sees one or the other.
        self._families = {**self._families, publisher: tuple(families)}

    def collect(self) -> Iterable[Metric]:
        for families in self._families.values():
            yield from families


class Exporter:
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
        # `analysis`, not `job`: Prometheus sets `job` on every scraped series itself.
        self.job_errors = Counter("causewatch_job_errors", "Analysis job runs that raised, by analysis",
                                  ["analysis"], registry=r)
        self.commit_seconds = Counter("causewatch_commit_seconds", "Time spent committing batches", registry=r)
        self.snapshots = Snapshots()
        r.register(self.snapshots)

    def publish(self, publisher: str, families: Iterable[Metric]) -> None:
        """Replace every gauge `publisher` exported before with `families` (its complete new state)."""
        self.snapshots.publish(publisher, families)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

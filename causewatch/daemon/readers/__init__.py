"""Every read of the daemon's store, by subject, as DataFrames or records (`causewatch.daemon.store`
owns every write): regions, tasks, models, probes, phases, samples, ranges (range questions), report,
units (jobs, services, containers),
and shared helpers.

Callers name the subject, e.g. `readers.models.anomalies(con)`; each module loads pandas, so the
daemon's ingesting process imports none of them (its workers and the CLI do).
"""

from causewatch.daemon.readers import models, phases, probes, ranges, regions, report, samples, shared, tasks, units

__all__ = ["models", "phases", "probes", "ranges", "regions", "report", "samples", "shared", "tasks", "units"]

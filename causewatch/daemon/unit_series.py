"""The running units as /metrics shows them: each unit's series labelled {node, unit, kind, job_id, user} from
its records (never from its samples), shown while it runs and dropped at its end, so a node's series stay
as many as its units running now, however many ran before (docs/agent.md, "Units").
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric

from causewatch import wire

LABELS = ("unit", "kind", "job_id", "user")
# ends remembered per daemon: a samples frame of an ended unit that comes late is not shown again
ENDED_KEPT = 1 << 14
# a running unit's facts from its records: (exported name, record field, HELP)
FACTS = (("causewatch_unit_start_time_seconds", "start", "When the unit started, unix seconds"),
         ("causewatch_unit_cpus", "cpus", "CPUs allocated to the unit (Slurm's allocation, else its cgroup's cpuset "
                                          "or CPU quota)"),
         ("causewatch_unit_memory_limit_bytes", "memory_bytes", "Memory allocated to the unit (Slurm's allocation, "
                                                               "else its cgroup's memory.max)"),
         ("causewatch_unit_gpus", "gpus", "GPUs allocated to the unit (Slurm's allocation)"))

# HELP of each metric an agent counts per unit (agent/cgroups.py, agent/slurm.py, agent/node/nvml.py),
# exported as causewatch_NAME
HELP = {
    "unit_cpu_seconds_total": "CPU seconds the unit used (cgroup cpu.stat usage, or its processes' times)",
    "unit_cpu_user_seconds_total": "User-mode CPU seconds the unit used",
    "unit_cpu_system_seconds_total": "Kernel-mode CPU seconds the unit used",
    "unit_cpu_throttled_seconds_total": "Seconds the unit's tasks were throttled by its CPU quota (cpu.stat)",
    "unit_cpu_periods_total": "Enforcement periods of the unit's CPU quota that elapsed (cpu.stat nr_periods)",
    "unit_cpu_throttled_periods_total": "Periods in which the unit was throttled (cpu.stat nr_throttled)",
    "unit_memory_bytes": "Memory the unit uses now (memory.current, or its processes' resident memory)",
    "unit_memory_peak_bytes": "The unit's memory high-water mark (memory.peak, or the highest sampled)",
    "unit_memory_oom_events_total": "Times the unit reached its memory limit and the OOM killer was invoked",
    "unit_memory_oom_kills_total": "Processes of the unit the OOM killer killed",
    "unit_io_read_bytes_total": "Bytes the unit read from block devices (io.stat rbytes, or its processes' read_bytes)",
    "unit_io_written_bytes_total": "Bytes the unit wrote to block devices (io.stat wbytes, or its processes' "
                                   "write_bytes)",
    "unit_io_reads_total": "Read operations the unit issued to block devices (io.stat rios)",
    "unit_io_writes_total": "Write operations the unit issued to block devices (io.stat wios)",
    "unit_pressure_cpu_waiting_seconds_total": "Seconds some of the unit's tasks waited for a CPU (cpu.pressure some)",
    "unit_pressure_memory_waiting_seconds_total": "Seconds some of the unit's tasks waited for memory "
                                                  "(memory.pressure some)",
    "unit_pressure_memory_stalled_seconds_total": "Seconds all of the unit's tasks were stalled on memory "
                                                  "(memory.pressure full)",
    "unit_pressure_io_waiting_seconds_total": "Seconds some of the unit's tasks waited for I/O (io.pressure some)",
    "unit_pressure_io_stalled_seconds_total": "Seconds all of the unit's tasks were stalled on I/O (io.pressure full)",
    "unit_processes": "Processes of the unit (counted where its processes, not a cgroup, are the unit)",
    "unit_gpu_processes": "Processes of the unit on the GPU, as NVML lists its compute and graphics processes",
    "unit_gpu_memory_bytes": "GPU memory the unit's processes use on the GPU, as NVML gives each process's",
}


def unit_labels(body: dict) -> dict[str, str]:
    return {"unit": body["unit"], "kind": body["kind"], "job_id": body.get("job_id") or "",
            "user": body.get("user") or ""}


class UnitSeries:
    """The units running per (node, unit): their labels and facts, as the newest record said."""

    def __init__(self):
        self.running: dict[tuple[str, str], dict] = {}
        self.ended: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    @staticmethod
    def changes(frames: Iterable[wire.Frame]) -> dict[tuple[str, str], dict | None]:
        """(node, unit) -> its newest record's body, or None for one that ended, of a batch's unit records."""
        out: dict[tuple[str, str], dict | None] = {}
        for f in frames:
            if f.type == "unit":
                key = (f.node, f.body["unit"])
                out.pop(key, None)
                out[key] = None if f.body["event"] == "end" else f.body
        return out

    def apply(self, changes: dict[tuple[str, str], dict | None]) -> None:
        for key, body in changes.items():
            if body is None:
                self.running.pop(key, None)
                self.ended[key] = None
                if len(self.ended) > ENDED_KEPT:
                    self.ended.popitem(last=False)
            else:
                old = self.running.get(key, {})
                self.running[key] = {**old, **{k: v for k, v in body.items() if v is not None}}
                self.ended.pop(key, None)

    def seed(self, rows: Iterable[dict]) -> None:
        """The units the store holds as running (a daemon that restarts while they run)."""
        for r in rows:
            self.running[(r["node"], r["unit"])] = {k: v for k, v in r.items() if v is not None and k != "node"}

    def labels(self, node: str, scope: str) -> dict[str, str]:
        """A unit scope's series labels (an unknown unit: its name and kind alone)."""
        body = self.running.get((node, scope)) or {"unit": scope, "kind": wire.unit_kind(scope)}
        return {"node": node, **unit_labels(body)}

    @staticmethod
    def families(running: dict[tuple[str, str], dict], shard: dict[str, str]) -> Iterable[Metric]:
        """The running units' facts (a copy of `running` taken under the exporter's lock)."""
        for name, fact, help in FACTS:
            family = GaugeMetricFamily(name, help, labels=["node", *LABELS, *shard])
            for (node, _), body in running.items():
                if body.get(fact) is not None:
                    family.add_metric([node, *unit_labels(body).values(), *shard.values()], float(body[fact]))
            yield family

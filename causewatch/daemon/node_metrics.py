"""What the agents' own metric names (those node_exporter has not: a target process, perf counts) are on
/metrics: the Prometheus type and HELP of each, after node_exporter's shapes (cumulative counts are
counters ending in _total; a CPU is a label). The node's are node_exporter's (`node_families`).

Stored names stay the agents' (the analyses and the store read them); only the exposition renames.
"""

from __future__ import annotations

import re

from causewatch.daemon import unit_series

# agent name (without `.cpuN`) -> HELP; a name ending in _total is a counter, the rest gauges
_AGENT = {
    "top_process_cpu_ratio": "CPU seconds per second of the node's busiest processes besides the watched one, "
                             "summed by command (the agent's last look, every few seconds)",
    "top_process_count": "Processes of each command among the node's busiest (top_process_cpu_ratio)",
    "agent_collector_failure_info": "1 while a node collector of the agent fails, with the reason it gives "
                                    "(its node_scrape_collector_success is 0)",
    "gpu_field_failure_info": "1 while a field of a GPU (a DCGM_FI_DEV_* name, or processes) cannot be read "
                              "through NVML, with the reason NVML gives; the GPU's other fields go on",
    # the agent's own delivery counts (sender.Sender.counts), sent as samples since the agent serves nothing
    "agent_frames_acked_total": "Frames the agent sent that the daemon acked (stored, or stored before)",
    "agent_frames_nacked_total": "Nacks the agent got from the daemon, every one",
    "agent_frames_refused_total": "Frames still unsettled that a nack refused (dropped, or kept to resend)",
    "agent_frames_resent_total": "Frames the agent sent again after a disconnect or a resend timeout",
    "agent_spool_dropped_frames_total": "Unsent frames the agent dropped from its full spool",
}
_PROCESS = {
    "process_cpu_user_seconds_total": "User-mode CPU seconds of the watched process (scope)",
    "process_cpu_system_seconds_total": "Kernel-mode CPU seconds of the watched process (scope)",
    "process_children_cpu_seconds_total": "CPU seconds of the watched process's waited-for children",
    "process_cpu_utilization_ratio": "CPU seconds per second of the watched process over the last interval "
                                     "(above 1 with several threads busy)",
    "process_resident_memory_bytes": "Resident memory of the watched process",
    "process_virtual_memory_bytes": "Virtual memory of the watched process",
    "process_read_bytes_total": "Bytes the watched process read from storage",
    "process_written_bytes_total": "Bytes the watched process wrote to storage",
    "process_read_calls_total": "Read system calls of the watched process",
    "process_write_calls_total": "Write system calls of the watched process",
    "process_threads": "Threads of the watched process",
    "process_open_fds": "Open file descriptors of the watched process",
    "process_voluntary_context_switches_total": "Times the watched process gave up a CPU itself (waiting)",
    "process_involuntary_context_switches_total": "Times the watched process was taken off a CPU (contention)",
}
# perf_event_open counts since the agent opened them: cumulative, so counters (the agent's names lack _total)
_PERF = {
    "cycles": "CPU cycles counted by perf (hardware)",
    "instructions": "Instructions retired, counted by perf (hardware)",
    "cache_references": "Last-level cache references counted by perf (hardware)",
    "cache_misses": "Last-level cache misses counted by perf (hardware)",
    "branch_instructions": "Branch instructions retired, counted by perf (hardware)",
    "branch_misses": "Mispredicted branches counted by perf (hardware)",
    "l1d_read_misses": "L1 data cache read misses counted by perf (hardware)",
    "llc_read_misses": "Last-level cache read misses counted by perf (hardware)",
    "task_clock_seconds": "CPU time of the counted tasks, seconds (perf's task-clock)",
    "page_faults": "Page faults of the counted tasks (perf software event)",
    "context_switches": "Context switches of the counted tasks (perf software event)",
    "cpu_migrations": "Moves of the counted tasks from one CPU to another (perf software event)",
}
_RATIOS = {
    "ipc": "Instructions per cycle over the agent's last interval (perf)",
    "cpi": "Cycles per instruction over the agent's last interval (perf)",
    "cache_miss_ratio": "Cache misses per cache reference over the agent's last interval (perf)",
    "branch_miss_ratio": "Branch misses per branch instruction over the agent's last interval (perf)",
}
# a unit's perf events in cgroup mode (agent/unit_perf.py): its count, and the share of the unit's time counted
_UNIT_PERF = {**{f"unit_perf_{k}_total": f"{v}, for the unit's cgroup" for k, v in _PERF.items()},
              **{f"unit_perf_{k}_running_ratio": f"Share of the unit's time its {k} event was counted (the rest "
                                                 "extrapolated: running / enabled time, over the CPUs)" for k in _PERF}}
HELP = {**_AGENT, **_PROCESS, **{f"{k}_total": v for k, v in _PERF.items()}, **_RATIOS, **unit_series.HELP,
        **_UNIT_PERF}
_CUMULATIVE = frozenset(_PERF)
_NOT_IN_NAMES = re.compile(r"[^a-zA-Z0-9_:]")


def exported(metric: str) -> str:
    """An agent's base name (no `.cpuN`, no mode) as exported after `causewatch_`: cumulative perf counts
    gain _total; characters Prometheus refuses become _."""
    return _NOT_IN_NAMES.sub("_", f"{metric}_total" if metric in _CUMULATIVE else metric)


def describe(name: str) -> tuple[str, str]:
    """("counter" or "gauge", HELP) of an exported name after `causewatch_`; a name no agent of ours
    sends (a user's own metric) says so."""
    kind = "counter" if name.endswith("_total") else "gauge"
    return kind, HELP.get(name, f"{name} as an agent sent it (not one of causewatch's own metrics)")

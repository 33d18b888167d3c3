"""What the agents' metric names are on /metrics: the Prometheus type and HELP of each, after
node_exporter's shapes (cumulative counts are counters ending in _total; CPU and mode are labels).

Stored names stay the agents' (the analyses and the store read them); only the exposition renames.
"""

from __future__ import annotations

import re

# agent name (without `.cpuN`) -> HELP; a name ending in _total is a counter, the rest gauges
_SYSTEM = {
    "cpu_utilization_ratio": "Share of CPU time spent neither idle nor in iowait over the agent's last sampling "
                             "interval, 0 to 1 (per CPU with the cpu label)",
    "load1": "Load average over 1 minute (runnable and uninterruptible tasks)",
    "load5": "Load average over 5 minutes",
    "load15": "Load average over 15 minutes",
    "memory_total_bytes": "Physical memory of the node",
    "memory_available_bytes": "Memory available to new programs without swapping (MemAvailable)",
    "memory_used_bytes": "Memory in use: total minus free, buffers and page cache",
    "swap_total_bytes": "Swap space of the node",
    "swap_used_bytes": "Swap space in use",
    "swap_in_bytes_total": "Bytes swapped in from disk since boot",
    "swap_out_bytes_total": "Bytes swapped out to disk since boot",
    "disk_read_bytes_total": "Bytes read from all disks since boot",
    "disk_written_bytes_total": "Bytes written to all disks since boot",
    "disk_reads_total": "Reads completed on all disks since boot",
    "disk_writes_total": "Writes completed on all disks since boot",
    "net_received_bytes_total": "Bytes received on all network interfaces since boot",
    "net_sent_bytes_total": "Bytes sent on all network interfaces since boot",
    "net_received_packets_total": "Packets received on all network interfaces since boot",
    "net_sent_packets_total": "Packets sent on all network interfaces since boot",
    "net_errors_total": "Receive and send errors on all network interfaces since boot",
    "net_dropped_total": "Received and sent packets dropped on all network interfaces since boot",
    "top_process_cpu_ratio": "CPU seconds per second of the node's busiest processes besides the watched one, "
                             "summed by command (the agent's last look, every few seconds)",
    "top_process_count": "Processes of each command among the node's busiest (top_process_cpu_ratio)",
    "agent_collector_failure_info": "1 while a node collector of the agent fails, with the reason it gives "
                                    "(its node_scrape_collector_success is 0)",
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
CPU_SECONDS = "cpu_seconds_total"
CPU_SECONDS_HELP = "Seconds the CPUs spent in each mode since boot (node_exporter's node_cpu_seconds_total)"
HELP = {**_SYSTEM, **_PROCESS, **{f"{k}_total": v for k, v in _PERF.items()}, **_RATIOS, CPU_SECONDS: CPU_SECONDS_HELP}
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

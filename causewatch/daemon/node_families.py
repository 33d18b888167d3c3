"""The node collectors' series at /metrics under node_exporter's own names (`node_...`, no `causewatch_`
prefix), so dashboards and rules written for node_exporter find them: each name's type and HELP."""

from __future__ import annotations

# name prefix -> where the agent reads it; the longest matching prefix wins
_SOURCES = {
    "node_cpu_": "/proc/stat per CPU and mode",
    "node_cpu_frequency": "sysfs cpufreq, hertz",
    "node_cpu_scaling": "sysfs cpufreq, hertz",
    "node_cpu_core_throttles": "sysfs thermal_throttle, per core",
    "node_cpu_package_throttles": "sysfs thermal_throttle, per package",
    "node_context_switches": "/proc/stat", "node_forks": "/proc/stat", "node_intr": "/proc/stat",
    "node_procs_": "/proc/stat", "node_boot_time": "/proc/stat btime, unix seconds",
    "node_load": "/proc/loadavg", "node_memory_": "/proc/meminfo", "node_vmstat_": "/proc/vmstat",
    "node_pressure_": "/proc/pressure (PSI), seconds stalled", "node_filefd_": "/proc/sys/fs/file-nr",
    "node_entropy_": "/proc/sys/kernel/random", "node_disk_": "/proc/diskstats per device",
    "node_disk_info": "/proc/diskstats and udev: the device's identity, value 1",
    "node_filesystem_": "statvfs of each mount",
    "node_network_": "/sys/class/net per interface", "node_network_receive": "/proc/net/dev per interface",
    "node_network_transmit": "/proc/net/dev per interface",
    "node_network_transmit_queue_length": "/sys/class/net per interface",
    "node_network_receive_nohandler": "/sys/class/net statistics per interface",
    "node_network_info": "/sys/class/net: the interface's identity, value 1",
    "node_softnet_": "/proc/net/softnet_stat per CPU", "node_netstat_": "/proc/net/netstat, snmp and snmp6",
    "node_sockstat_": "/proc/net/sockstat and sockstat6", "node_arp_": "/proc/net/arp per interface",
    "node_udp_queues": "/proc/net/udp and udp6, bytes queued", "node_nf_conntrack_": "netfilter conntrack",
    "node_time_": "the node's clock", "node_timex_": "adjtimex(2)", "node_uname_": "uname(2), value 1",
    "node_os_": "/etc/os-release", "node_selinux_": "/sys/fs/selinux",
    "node_scrape_collector_": "the agent's run of each node collector",
    "node_textfile_": "the *.prom files of the agent's textfile_directory",
}
_UNTYPED = ("node_vmstat_", "node_netstat_")   # as node_exporter types them


def describe(name: str) -> tuple[str, str]:
    """("counter", "gauge" or "untyped", HELP) of a node_exporter-named series."""
    kind = "untyped" if name.startswith(_UNTYPED) else "counter" if name.endswith("_total") else "gauge"
    source = max((p for p in _SOURCES if name.startswith(p)), key=len, default=None)
    words = name.removeprefix("node_").replace("_", " ")
    return kind, f"{words} ({_SOURCES[source]}; node_exporter's name)" if source else f"{words} (node_exporter's name)"


def describe_textfile(name: str) -> tuple[str, str]:
    """("untyped", HELP) of a series a node's textfile gave under a name of its own: its TYPE and HELP stay
    on the node, and `rate()` reads an untyped counter alike."""
    return "untyped", f"{name} (a .prom file of the agent's textfile_directory, node_exporter's textfile collector)"

"""CPU frequency and thermal throttling from sysfs (node_exporter's cpufreq collector and its cpu
collector's throttle counts); a machine without them (a VM) gives none."""

from __future__ import annotations

import glob
import os

from causewatch.agent.node.files import name, number, path, read_or

_FREQ = {"cpuinfo_cur_freq": "node_cpu_frequency_hertz", "cpuinfo_max_freq": "node_cpu_frequency_max_hertz",
         "cpuinfo_min_freq": "node_cpu_frequency_min_hertz", "scaling_cur_freq": "node_cpu_scaling_frequency_hertz",
         "scaling_max_freq": "node_cpu_scaling_frequency_max_hertz",
         "scaling_min_freq": "node_cpu_scaling_frequency_min_hertz"}


class CpuFreq:
    name = "cpufreq"

    def __init__(self, sys: str = "/sys"):
        self.dir = path(sys, "devices/system/cpu")

    def collect(self) -> dict[str, float]:
        out: dict[str, float] = {}
        cores: dict[tuple[str, str], float] = {}
        packages: dict[str, float] = {}
        for cpu_dir in sorted(glob.glob(path(self.dir, "cpu[0-9]*"))):
            cpu = os.path.basename(cpu_dir)[3:]
            for file, metric in _FREQ.items():
                text = read_or(path(cpu_dir, "cpufreq", file))
                if text:
                    out[name(metric, ("cpu", cpu))] = number(text) * 1000   # kHz
            core = read_or(path(cpu_dir, "thermal_throttle/core_throttle_count"))
            if core is not None:   # one count per physical core and package, however many threads share them
                package = read_or(path(cpu_dir, "topology/physical_package_id"), "0")
                cores[(package, read_or(path(cpu_dir, "topology/core_id"), cpu))] = number(core)
                total = read_or(path(cpu_dir, "thermal_throttle/package_throttle_count"))
                if total is not None:
                    packages[package] = number(total)
        out.update({name("node_cpu_core_throttles_total", ("core", c), ("package", p)): v
                    for (p, c), v in cores.items()})
        out.update({name("node_cpu_package_throttles_total", ("package", p)): v for p, v in packages.items()})
        return out

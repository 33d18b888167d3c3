"""NVIDIA GPUs through NVML (nvidia-ml-py's `pynvml`), under DCGM-exporter's names, units and labels
(`DCGM_FI_DEV_*{gpu,UUID,modelName}`: MiB, W, MHz, °C, %, mJ), so a user's GPU dashboards find them.

Each NVML call is read on its own: one that fails (a field the device does not support) leaves only its
fields out, its reason in `gpu_field_failure_info{gpu,field,reason}` and in hello. A node without NVML
(no pynvml, no libnvidia-ml, no driver, no device) has the collector unavailable: `open()` says why and
the schedule runs it not at all. Each run also keeps which processes use each GPU (`take_processes`),
which `GpuUse` turns into the rows of the units they run in.
"""

from __future__ import annotations

import collections
import importlib
from dataclasses import dataclass

from causewatch.agent.node.files import name

MIB = 1 << 20
MAX_MODEL = 64    # characters of a model name in its label
MAX_REASON = 80   # characters of a field's reason in its label
ECC = (("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "CORRECTED", "VOLATILE"),
       ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "UNCORRECTED", "VOLATILE"),
       ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "CORRECTED", "AGGREGATE"),
       ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "UNCORRECTED", "AGGREGATE"))
PROCESSES = "processes"   # the field name of the running-process lists in reasons


@dataclass
class Device:
    index: int
    handle: object
    labels: tuple[tuple[str, str], ...]
    events: object = None            # its XID event set, or None
    events_reason: str = ""           # why it has none
    xid: float = 0.0                 # the last XID seen since the agent started (DCGM's gauge)


def _utilization(nv, d: Device) -> dict[str, float]:
    u = nv.nvmlDeviceGetUtilizationRates(d.handle)
    return {"DCGM_FI_DEV_GPU_UTIL": u.gpu, "DCGM_FI_DEV_MEM_COPY_UTIL": u.memory}


def _memory(nv, d: Device) -> dict[str, float]:
    m = nv.nvmlDeviceGetMemoryInfo(d.handle)   # whole MiB, as DCGM and nvidia-smi give them
    return {"DCGM_FI_DEV_FB_USED": m.used // MIB, "DCGM_FI_DEV_FB_FREE": m.free // MIB,
            "DCGM_FI_DEV_FB_TOTAL": m.total // MIB}


def _power(nv, d: Device) -> dict[str, float]:
    return {"DCGM_FI_DEV_POWER_USAGE": nv.nvmlDeviceGetPowerUsage(d.handle) / 1000}   # mW


def _energy(nv, d: Device) -> dict[str, float]:
    return {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": nv.nvmlDeviceGetTotalEnergyConsumption(d.handle)}


def _sm_clock(nv, d: Device) -> dict[str, float]:
    return {"DCGM_FI_DEV_SM_CLOCK": nv.nvmlDeviceGetClockInfo(d.handle, nv.NVML_CLOCK_SM)}


def _mem_clock(nv, d: Device) -> dict[str, float]:
    return {"DCGM_FI_DEV_MEM_CLOCK": nv.nvmlDeviceGetClockInfo(d.handle, nv.NVML_CLOCK_MEM)}


def _temperature(nv, d: Device) -> dict[str, float]:
    return {"DCGM_FI_DEV_GPU_TEMP": nv.nvmlDeviceGetTemperature(d.handle, nv.NVML_TEMPERATURE_GPU)}


def _ecc(metric: str, kind: str, counter: str):
    def read(nv, d: Device) -> dict[str, float]:
        return {metric: nv.nvmlDeviceGetTotalEccErrors(d.handle, getattr(nv, f"NVML_MEMORY_ERROR_TYPE_{kind}"),
                                                        getattr(nv, f"NVML_{counter}_ECC"))}
    return read


class Unread(Exception):
    """A field that cannot be read for a reason found earlier (its message)."""


def _xid(nv, d: Device) -> dict[str, float]:
    """The last XID error of the device's critical-error events, drained without waiting (0: none yet)."""
    if d.events is None:
        raise Unread(d.events_reason)
    while True:
        try:
            event = nv.nvmlEventSetWait(d.events, 0)
        except nv.NVMLError_Timeout:
            return {"DCGM_FI_DEV_XID_ERRORS": d.xid}
        if event.eventType & nv.nvmlEventTypeXidCriticalError:
            d.xid = float(event.eventData)


# (the fields of one NVML call, its reader)
READS = ((("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"), _utilization),
         (("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_TOTAL"), _memory),
         (("DCGM_FI_DEV_POWER_USAGE",), _power), (("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), _energy),
         (("DCGM_FI_DEV_SM_CLOCK",), _sm_clock), (("DCGM_FI_DEV_MEM_CLOCK",), _mem_clock),
         (("DCGM_FI_DEV_GPU_TEMP",), _temperature), *(((m,), _ecc(m, k, c)) for m, k, c in ECC),
         (("DCGM_FI_DEV_XID_ERRORS",), _xid))
FIELDS = tuple(f for fields, _ in READS for f in fields)


def _reason(e: Exception) -> str:
    return f"{type(e).__name__}: {e}"


class Nvml:
    name = "nvml"

    def __init__(self, module: str = "pynvml"):
        self.module = module
        self._nv = None
        self._devices: list[Device] = []
        self.failing: dict[tuple[int, str], str] = {}   # (gpu, field) -> why its last read failed
        self._processes: collections.deque = collections.deque(maxlen=1)   # the newest run's, taken once

    def open(self) -> str | None:
        """None once NVML answers with a device, else why the collector is unavailable here."""
        try:
            nv = importlib.import_module(self.module)
        except ImportError as e:
            return f"{self.module} not importable ({e}); pip install 'causewatch[gpu]' (nvidia-ml-py)"
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            return f"nvmlInit: {e}"
        try:
            count = nv.nvmlDeviceGetCount()
            if count == 0:
                nv.nvmlShutdown()
                return "no NVIDIA GPU (nvmlDeviceGetCount is 0)"
            self._devices = [self._device(nv, i) for i in range(count)]
        except nv.NVMLError as e:
            nv.nvmlShutdown()
            return f"listing the GPUs: {e}"
        self._nv = nv
        return None

    @staticmethod
    def _device(nv, index: int) -> Device:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        labels = (("UUID", str(nv.nvmlDeviceGetUUID(handle))), ("gpu", str(index)),
                  ("modelName", str(nv.nvmlDeviceGetName(handle))[:MAX_MODEL]))
        device = Device(index, handle, labels)
        try:
            events = nv.nvmlEventSetCreate()
            nv.nvmlDeviceRegisterEvents(handle, nv.nvmlEventTypeXidCriticalError, events)
            device.events = events
        except nv.NVMLError as e:
            device.events_reason = f"XID events: {_reason(e)}"
        return device

    def collect(self) -> dict[str, float]:
        if self._nv is None:
            raise RuntimeError("NVML is not open")
        out: dict[str, float] = {}
        failing: dict[tuple[int, str], str] = {}
        processes: dict[int, dict[int, float | None]] = {}
        for d in self._devices:
            for fields, read in READS:
                try:
                    values = read(self._nv, d)
                except (self._nv.NVMLError, Unread) as e:
                    failing.update({(d.index, f): str(e) if isinstance(e, Unread) else _reason(e) for f in fields})
                    continue
                out.update({name(metric, *d.labels): float(value) for metric, value in values.items()})
            try:
                processes[d.index] = self._running(d)
            except self._nv.NVMLError as e:
                failing[(d.index, PROCESSES)] = _reason(e)
        for (gpu, f), reason in failing.items():
            out[name("gpu_field_failure_info", ("field", f), ("gpu", str(gpu)), ("reason", reason[:MAX_REASON]))] = 1.0
        self.failing = failing
        self._processes.append(processes)
        return out

    def _running(self, d: Device) -> dict[int, float | None]:
        """{pid: GPU memory it uses, bytes (None where NVML does not say)} of the device's compute and
        graphics processes; one in both lists counts once."""
        out: dict[int, float | None] = {}
        for listed in (self._nv.nvmlDeviceGetComputeRunningProcesses, self._nv.nvmlDeviceGetGraphicsRunningProcesses):
            for p in listed(d.handle):
                used = None if p.usedGpuMemory is None else float(p.usedGpuMemory)
                out[p.pid] = used if out.get(p.pid) is None else max(out[p.pid], used or 0.0)
        return out

    def take_processes(self) -> dict[int, dict[int, float | None]] | None:
        """{gpu: {pid: bytes}} of the newest run not taken yet, or None."""
        try:
            return self._processes.popleft()
        except IndexError:
            return None

    def field_states(self) -> dict[str, str]:
        """{field: "reason (gpu 0, 1)"} of the fields whose last read failed, for hello."""
        by_field: dict[str, dict[str, list[str]]] = {}
        for (gpu, f), reason in sorted(self.failing.items()):
            by_field.setdefault(f, {}).setdefault(reason, []).append(str(gpu))
        return {f: "; ".join(f"{reason} (gpu {', '.join(gpus)})" for reason, gpus in reasons.items())
                for f, reasons in by_field.items()}

    def close(self) -> None:
        if self._nv is None:
            return
        for d in self._devices:
            if d.events is not None:
                self._nv.nvmlEventSetFree(d.events)
        self._nv.nvmlShutdown()
        self._nv = None


class GpuUse:
    """The GPU use of each running unit from the processes NVML lists: `unit_gpu_processes{gpu}` and
    `unit_gpu_memory_bytes{gpu}` of the deepest unit whose cgroup holds each pid. A unit whose processes
    left a GPU gets 0 for it while it runs (its series would show the last use until its end); a GPU whose
    list could not be read this run gives nothing, not 0."""

    def __init__(self):
        self._had: dict[str, dict[str, int]] = {}   # unit -> {name it was sent: its GPU}

    def rows(self, processes: dict[int, dict[int, float | None]], unit_of,
             running) -> dict[str, dict[str, float]]:
        """{unit: its row} of `processes` ({gpu: {pid: bytes}}), `unit_of(pid)` naming a pid's unit (or
        None) among the units `running` now."""
        out: dict[str, dict[str, float]] = {}
        gpus: dict[str, dict[str, int]] = {}
        for gpu, procs in processes.items():
            for pid, used in procs.items():
                unit = unit_of(pid)
                if unit is None:
                    continue
                row, of = out.setdefault(unit, {}), gpus.setdefault(unit, {})
                count = name("unit_gpu_processes", ("gpu", str(gpu)))
                row[count], of[count] = row.get(count, 0.0) + 1, gpu
                if used is not None:
                    memory = name("unit_gpu_memory_bytes", ("gpu", str(gpu)))
                    row[memory], of[memory] = row.get(memory, 0.0) + used, gpu
        for unit, had in ((u, h) for u, h in self._had.items() if u in running):
            left = {metric: gpu for metric, gpu in had.items() if gpu in processes and metric not in out.get(unit, {})}
            if left:
                out.setdefault(unit, {}).update(dict.fromkeys(left, 0.0))
            unread = {metric: gpu for metric, gpu in had.items() if gpu not in processes}   # remembered for later
            if left or unread:
                gpus.setdefault(unit, {}).update({**left, **unread})
        self._had = gpus
        return out

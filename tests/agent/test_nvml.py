"""The NVML collector against a fake NVML (the `pynvml` module replaced at import by a double that plays two
GPUs, their processes and failing calls): every field read and exported under DCGM-exporter's names, a
failing call marking only its field, GPU processes joined to the units they run in, the series at a real
daemon's /metrics; and this machine's real absence of NVML, which only hello tells."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
import types
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from causewatch import wire
from causewatch.agent import cgroups, unitwatch
from causewatch.agent.node import nvml
from causewatch.agent.node.schedule import NodeCollectors, Spec
from causewatch.agent.runner import GPU_RATE, Agent
from causewatch.agent.sender import Sender
from causewatch.cli import main
from causewatch.config import AgentConfig, DaemonConfig
from causewatch.daemon.server import Daemon

GIB = 1 << 30
MESSAGES = {3: "Not Supported", 10: "Timeout", 12: "NVML Shared Library Not Found", 999: "Unknown Error"}


@dataclass
class FakeGpu:
    """What one device answers; `fail` names the NVML functions that raise (an error code) on it."""
    uuid: str
    model: str
    util: tuple = (37, 12)
    memory: tuple = (80 * GIB, 20 * GIB + 5 * (1 << 20) + 7)   # total, used (bytes)
    power_mw: int = 61456
    energy_mj: int = 123_456_789
    clocks: dict = field(default_factory=lambda: {1: 1410, 2: 1593})   # NVML_CLOCK_SM, NVML_CLOCK_MEM
    temperature: int = 41
    ecc: dict = field(default_factory=lambda: {(0, 0): 3, (1, 0): 1, (0, 1): 30, (1, 1): 2})   # (type, counter)
    compute: list = field(default_factory=list)    # (pid, bytes or None)
    graphics: list = field(default_factory=list)
    xids: list = field(default_factory=list)       # pending XID event data
    fail: dict = field(default_factory=dict)       # function name -> NVML error code


def fake_pynvml(gpus: list[FakeGpu], init_error: int | None = None) -> types.ModuleType:
    """A module with pynvml's names (`test_the_double_has_only_pynvmls_names`) playing `gpus`."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value):
            self.value = value

        def __str__(self):
            return MESSAGES.get(self.value, f"Unknown Error {self.value}")

    nv.NVMLError = NVMLError
    nv.NVMLError_NotSupported = type("NVMLError_NotSupported", (NVMLError,), {})
    nv.NVMLError_Timeout = type("NVMLError_Timeout", (NVMLError,), {})
    errors = {3: nv.NVMLError_NotSupported, 10: nv.NVMLError_Timeout}
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
    nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC = 0, 1
    nv.nvmlEventTypeXidCriticalError = 8
    nv.calls = []

    def device_call(fn):
        def call(gpu, *args):
            nv.calls.append(fn.__name__)
            if fn.__name__ in gpu.fail:
                code = gpu.fail[fn.__name__]
                raise errors.get(code, NVMLError)(code)
            return fn(gpu, *args)
        call.__name__ = fn.__name__
        setattr(nv, fn.__name__, call)
        return call

    def nvmlInit():
        if init_error is not None:
            raise NVMLError(init_error)
    nv.nvmlInit, nv.nvmlShutdown = nvmlInit, lambda: None
    nv.nvmlDeviceGetCount = lambda: len(gpus)
    nv.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    Process = types.SimpleNamespace

    @device_call
    def nvmlDeviceGetUUID(gpu):
        return gpu.uuid

    @device_call
    def nvmlDeviceGetName(gpu):
        return gpu.model

    @device_call
    def nvmlDeviceGetUtilizationRates(gpu):
        return types.SimpleNamespace(gpu=gpu.util[0], memory=gpu.util[1])

    @device_call
    def nvmlDeviceGetMemoryInfo(gpu):
        total, used = gpu.memory
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    @device_call
    def nvmlDeviceGetPowerUsage(gpu):
        return gpu.power_mw

    @device_call
    def nvmlDeviceGetTotalEnergyConsumption(gpu):
        return gpu.energy_mj

    @device_call
    def nvmlDeviceGetClockInfo(gpu, clock):
        return gpu.clocks[clock]

    @device_call
    def nvmlDeviceGetTemperature(gpu, sensor):
        assert sensor == 0
        return gpu.temperature

    @device_call
    def nvmlDeviceGetTotalEccErrors(gpu, kind, counter):
        return gpu.ecc[(kind, counter)]

    @device_call
    def nvmlDeviceGetComputeRunningProcesses(gpu):
        return [Process(pid=pid, usedGpuMemory=used) for pid, used in gpu.compute]

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses(gpu):
        return [Process(pid=pid, usedGpuMemory=used) for pid, used in gpu.graphics]

    @device_call
    def nvmlDeviceRegisterEvents(gpu, kinds, events):
        assert kinds == nv.nvmlEventTypeXidCriticalError
        events.append(gpu)

    nv.nvmlEventSetCreate = lambda: []
    nv.nvmlEventSetFree = lambda events: events.clear()

    def nvmlEventSetWait(events, timeout_ms):
        assert timeout_ms == 0   # never waits: a collector's run takes no longer for it
        pending = [g for g in events if g.xids]
        if not pending:
            raise nv.NVMLError_Timeout(10)
        return types.SimpleNamespace(eventType=8, eventData=pending[0].xids.pop(0), device=pending[0])
    nv.nvmlEventSetWait = nvmlEventSetWait
    return nv


def two_gpus() -> list[FakeGpu]:
    return [FakeGpu("GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52", "NVIDIA H100 80GB HBM3"),
            FakeGpu("GPU-11111111-2222-3333-4444-555555555555", "NVIDIA H100 80GB HBM3", util=(0, 0),
                    memory=(80 * GIB, 0), power_mw=70500, temperature=33)]


@pytest.fixture
def fake(monkeypatch):
    """Install a fake pynvml of the given GPUs where the collector imports it."""
    def install(gpus, init_error=None):
        module = fake_pynvml(gpus, init_error)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def labels(gpu: int, g: FakeGpu) -> dict[str, str]:
    return {"UUID": g.uuid, "gpu": str(gpu), "modelName": g.model}


def by_series(values: dict) -> dict[tuple[str, tuple], float]:
    out = {}
    for metric, value in values.items():
        base, lab = wire.unlabelled(metric)
        out[(base, tuple(sorted(lab.items())))] = value
    return out


def expected(gpu: int, g: FakeGpu) -> dict[tuple[str, tuple], float]:
    total, used = g.memory
    fields = {"DCGM_FI_DEV_GPU_UTIL": g.util[0], "DCGM_FI_DEV_MEM_COPY_UTIL": g.util[1],
              "DCGM_FI_DEV_FB_USED": used // (1 << 20), "DCGM_FI_DEV_FB_FREE": (total - used) // (1 << 20),
              "DCGM_FI_DEV_FB_TOTAL": total // (1 << 20), "DCGM_FI_DEV_POWER_USAGE": g.power_mw / 1000,
              "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": g.energy_mj, "DCGM_FI_DEV_SM_CLOCK": g.clocks[1],
              "DCGM_FI_DEV_MEM_CLOCK": g.clocks[2], "DCGM_FI_DEV_GPU_TEMP": g.temperature,
              "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": g.ecc[(0, 0)], "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": g.ecc[(1, 0)],
              "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": g.ecc[(0, 1)], "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": g.ecc[(1, 1)],
              "DCGM_FI_DEV_XID_ERRORS": 0}
    return {(f, tuple(sorted(labels(gpu, g).items()))): float(v) for f, v in fields.items()}


def test_every_field_is_read_and_exported_under_dcgm_names_and_units(fake):
    gpus = two_gpus()
    fake(gpus)
    collector = nvml.Nvml()
    assert collector.open() is None
    got = collector.collect()
    assert all(len(k) <= wire.MAX_NAME and wire.METRIC_NAME.fullmatch(k) for k in got)
    assert by_series(got) == {**expected(0, gpus[0]), **expected(1, gpus[1])}
    assert set(nvml.FIELDS) == {f for f, _ in by_series(got)}
    assert by_series(got)[("DCGM_FI_DEV_FB_USED", tuple(sorted(labels(0, gpus[0]).items())))] == 20 * 1024 + 5
    gpus[1].xids += [31, 79]   # two XID errors since the last run: DCGM's gauge keeps the last, and keeps it
    for _ in range(2):
        xid = by_series(collector.collect())[("DCGM_FI_DEV_XID_ERRORS", tuple(sorted(labels(1, gpus[1]).items())))]
        assert xid == 79.0
    assert collector.failing == {} and collector.field_states() == {}
    collector.close()


def test_a_failing_call_marks_only_its_field_and_hello_names_it(fake):
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetPowerUsage"] = 3              # NVMLError_NotSupported
    gpus[1].fail["nvmlDeviceGetTotalEccErrors"] = 999        # a generic NVMLError, every ECC counter
    gpus[1].fail["nvmlDeviceRegisterEvents"] = 3             # no XID events on this one
    fake(gpus)
    nodes = NodeCollectors([Spec(nvml.Nvml(), 10.0, 1.0)])
    states = nodes.open()
    row = nodes.collect()[10.0]
    got = by_series(row)
    want = {**expected(0, gpus[0]), **expected(1, gpus[1])}
    gone = {k for k in want if (k[0] == "DCGM_FI_DEV_POWER_USAGE" and ("gpu", "0") in k[1]) or
            (("gpu", "1") in k[1] and (k[0].startswith("DCGM_FI_DEV_ECC") or k[0] == "DCGM_FI_DEV_XID_ERRORS"))}
    assert len(gone) == 6
    read = {k: v for k, v in got.items() if k[0].startswith("DCGM_")}
    assert read == {k: v for k, v in want.items() if k not in gone}
    failures = sorted(dict(lab)["field"] + "@" + dict(lab)["gpu"] + ": " + dict(lab)["reason"]
                      for base, lab in got if base == "gpu_field_failure_info")
    assert failures == ["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL@1: NVMLError: Unknown Error",
                        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL@1: NVMLError: Unknown Error",
                        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL@1: NVMLError: Unknown Error",
                        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL@1: NVMLError: Unknown Error",
                        "DCGM_FI_DEV_POWER_USAGE@0: NVMLError_NotSupported: Not Supported",
                        "DCGM_FI_DEV_XID_ERRORS@1: XID events: NVMLError_NotSupported: Not Supported"]
    assert states["nvml"] == {"interval": 10.0, "state": "ok",
                              "DCGM_FI_DEV_POWER_USAGE": "NVMLError_NotSupported: Not Supported (gpu 0)",
                              "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "NVMLError: Unknown Error (gpu 1)",
                              "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "NVMLError: Unknown Error (gpu 1)",
                              "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "NVMLError: Unknown Error (gpu 1)",
                              "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "NVMLError: Unknown Error (gpu 1)",
                              "DCGM_FI_DEV_XID_ERRORS": "XID events: NVMLError_NotSupported: Not Supported (gpu 1)"}
    assert got[("node_scrape_collector_success", (("collector", "nvml"),))] == 1.0   # the collector itself works
    wire.decode(wire.encode("hello", "n", "b", 1, {"hostname": "n", "agent_version": "1", "collectors": states}))
    nodes.close()


def test_a_field_that_reads_again_comes_back(fake):
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetPowerUsage"] = 999
    fake(gpus)
    collector = nvml.Nvml()
    assert collector.open() is None
    assert not any(k.startswith("DCGM_FI_DEV_POWER_USAGE") and "gpu:0" in k for k in collector.collect())
    gpus[0].fail.clear()
    again = collector.collect()
    assert by_series(again)[("DCGM_FI_DEV_POWER_USAGE", tuple(sorted(labels(0, gpus[0]).items())))] == 61.456
    assert not [k for k in again if k.startswith("gpu_field_failure_info")] and collector.failing == {}


def test_the_double_has_only_pynvmls_names():
    """Every name the fake plays is one the real nvidia-ml-py has, so the collector calls nothing it lacks."""
    real = pytest.importorskip("pynvml")
    played = {n for n in vars(fake_pynvml([])) if not n.startswith("__") and n != "calls"}
    assert played - set(dir(real)) == set()
    assert issubclass(real.NVMLError_NotSupported, real.NVMLError) and real.NVML_CLOCK_SM == 1


def test_processes_on_both_lists_count_once_and_unknown_memory_is_left_out(fake):
    gpus = two_gpus()
    gpus[0].compute = [(101, 2 * GIB), (102, None)]
    gpus[0].graphics = [(101, 2 * GIB)]
    gpus[1].compute = [(103, GIB)]
    fake(gpus)
    collector = nvml.Nvml()
    collector.open()
    collector.collect()
    assert collector.take_processes() == {0: {101: 2.0 * GIB, 102: None}, 1: {103: float(GIB)}}
    assert collector.take_processes() is None   # each run's list is taken once
    use = nvml.GpuUse()
    units = {101: "job:7", 102: "job:7", 103: "service:x.service"}
    rows = use.rows({0: {101: 2.0 * GIB, 102: None}, 1: {103: float(GIB)}}, units.get, {"job:7", "service:x.service"})
    assert {u: by_series(r) for u, r in rows.items()} == {
        "job:7": {("unit_gpu_processes", (("gpu", "0"),)): 2.0, ("unit_gpu_memory_bytes", (("gpu", "0"),)): 2.0 * GIB},
        "service:x.service": {("unit_gpu_processes", (("gpu", "1"),)): 1.0,
                              ("unit_gpu_memory_bytes", (("gpu", "1"),)): float(GIB)}}
    later = use.rows({0: {}}, units.get, {"job:7"})   # job:7 left the GPU; x.service ended
    assert {u: by_series(r) for u, r in later.items()} == {
        "job:7": {("unit_gpu_processes", (("gpu", "0"),)): 0.0, ("unit_gpu_memory_bytes", (("gpu", "0"),)): 0.0}}
    use.rows({0: {101: float(GIB)}, 1: {103: float(GIB)}}, units.get, {"job:7", "service:x.service"})
    unread = use.rows({1: {}}, units.get, {"job:7", "service:x.service"})   # GPU 0's list not read this run
    assert {u: by_series(r) for u, r in unread.items()} == {
        "service:x.service": {("unit_gpu_processes", (("gpu", "1"),)): 0.0,
                              ("unit_gpu_memory_bytes", (("gpu", "1"),)): 0.0}}
    again = use.rows({0: {}}, units.get, {"job:7"})   # read again: job:7 left GPU 0 meanwhile
    assert {u: by_series(r) for u, r in again.items()} == {
        "job:7": {("unit_gpu_processes", (("gpu", "0"),)): 0.0, ("unit_gpu_memory_bytes", (("gpu", "0"),)): 0.0}}


def test_a_pid_is_the_deepest_running_unit_whose_cgroup_holds_it(tmp_path):
    """A task of a step is the step's, a process of the job's own folder the job's, the rest none's."""
    root = tmp_path / "cg"
    (root / "system.slice/slurmstepd.scope/job_42/step_0/user/task_0").mkdir(parents=True)
    (root / "system.slice/gpu.service").mkdir(parents=True)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self/mounts").write_text(f"cgroup2 {root} cgroup2 rw,relatime 0 0\n")
    for pid, path in ((11, "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"),
                      (12, "/system.slice/slurmstepd.scope/job_42"), (13, "/system.slice/gpu.service"),
                      (14, "/user.slice"), (15, "/system.slice/gpu.service.bak")):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cgroup").write_text(f"1:name=systemd:/elsewhere\n0::{path}\n")
    watch = unitwatch.UnitWatch(str(root), proc=str(proc))
    watch.open()
    watch.tick()
    assert [watch.unit_of(pid).get("unit") for pid in (11, 12, 13, 14, 15, 16)] == [
        "step:42.0", "job:42", "service:gpu.service", None, None, None]


# ---- through the agent: the units' rows, hello, the daemon ----

class Recorder:
    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def send(self, kind, body):
        wire.decode(wire.encode(kind, "n", "b", 1, body))
        self.sent.append((kind, body))

    def names(self) -> set[str]:
        return {n for kind, body in self.sent if kind == "samples" for n in body["names"]}

    def values(self, scope: str, metric: str) -> list[float]:
        out = []
        for kind, body in self.sent:
            if kind == "samples" and body["scope"] == scope and metric in body["names"]:
                _, names, values, _ = wire.samples_arrays(body)
                out += values[:, names.index(metric)].tolist()
        return out


@pytest.fixture
def service():
    """A fake service's cgroup v2 folder made here with a sleeping child in it (skips where cgroup v2
    is not writable); yields (the folder under which it lies, the child)."""
    mounted = cgroups.find_root()
    if mounted is None:
        pytest.skip("no cgroup v2 hierarchy is mounted here")
    top = Path(mounted) / f"cw-nvml-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    folder = top / "system.slice/gpu.service"
    try:
        folder.mkdir(parents=True)
    except OSError as e:
        pytest.skip(f"cgroup v2 at {mounted} is not writable here ({e.strerror})")

    def join():
        with open(folder / "cgroup.procs", "w") as f:
            f.write("0")
    child = subprocess.Popen(["sleep", "60"], preexec_fn=join)
    yield top, child, folder
    if child.poll() is None:
        child.kill()
        child.wait()
    for path in (folder, folder.parent, top):
        if path.exists():
            path.rmdir()


def test_gpu_processes_are_joined_to_their_units_and_go_with_their_end(fake, service, tmp_path):
    """A real process in a real cgroup (a fake service) that the fake NVML lists on GPU 0, and the agent's
    own process (in no unit) on GPU 1: the service's rows carry its GPU use, sent before its end."""
    top, child, folder = service
    gpus = two_gpus()
    gpus[0].compute = [(child.pid, 3 * GIB)]
    gpus[1].compute = [(os.getpid(), GIB)]
    fake(gpus)
    t = [1000.0]
    cfg = AgentConfig(node="n", spool=str(tmp_path / "spool"), cgroup_root=str(top))
    sender = Recorder()
    agent = Agent(cfg, sender, monotonic=lambda: t[0])
    agent.units.slurm_procs = False
    assert agent.open()["collectors"]["nvml"] == {"interval": 10.0, "state": "ok"}
    for _ in range(11):   # NVML at the first tick and at the 11th
        agent.sample_slow()
        t[0] += 1.0
    gpus[0].compute = []
    for _ in range(10):
        agent.sample_slow()
        t[0] += 1.0
    agent.flush_batches()
    unit = "service:gpu.service"
    memory, count = (wire.labelled(m, {"gpu": "0"}) for m in ("unit_gpu_memory_bytes", "unit_gpu_processes"))
    assert sender.values(unit, memory) == [3.0 * GIB, 3.0 * GIB, 0.0]   # then it left the GPU
    assert sender.values(unit, count) == [1.0, 1.0, 0.0]
    assert not [n for n in sender.names() if n.startswith("unit_gpu") and "gpu:1" in n]   # the agent's own: no unit
    gpus[0].compute = [(child.pid, GIB)]
    t[0] += 10.0
    agent.sample_slow()   # a run with the GPU in use again, its batch not flushed...
    child.kill()
    child.wait()
    folder.rmdir()
    t[0] += 1.0
    agent.sample_slow()   # ...goes out before the service's end
    kinds = [(kind, body.get("scope") or body.get("event")) for kind, body in sender.sent[-3:]]
    assert ("samples", unit) in kinds and kinds[-1] == ("unit", "end")
    assert sender.values(unit, memory)[-1] == float(GIB)
    assert (unit, GPU_RATE) not in agent._batches
    agent.node.close()


def _sent_names(tmp_path, name: str, **intervals) -> tuple[dict, set[str]]:
    sender = Recorder()
    cfg = AgentConfig(node="n", spool=str(tmp_path / name), units=False, collector_intervals=intervals)
    agent = Agent(cfg, sender)
    hello = agent.open()
    agent.sample_slow()
    agent.flush_batches()
    agent.node.close()
    return hello, sender.names()


def test_no_nvml_on_this_machine_is_a_reason_in_hello_and_nothing_else(tmp_path):
    """The real nvidia-ml-py without NVIDIA's library (this machine): the collector is unavailable, hello
    says why, and the agent sends the very series it sends with the collector off."""
    pytest.importorskip("pynvml")
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has libnvidia-ml: the absence path needs a machine without it")
    hello, names = _sent_names(tmp_path, "default")
    assert hello["collectors"]["nvml"] == {"interval": 10.0,
                                           "state": "unavailable: nvmlInit: NVML Shared Library Not Found"}
    off_hello, off_names = _sent_names(tmp_path, "off", nvml=0)
    assert off_hello["collectors"]["nvml"]["state"] == "off (collector_intervals.nvml = 0)"
    assert names == off_names and not [n for n in names if "nvml" in n or n.startswith(("DCGM_", "gpu_"))]
    assert {k: v for k, v in hello["collectors"].items() if k != "nvml"} == \
           {k: v for k, v in off_hello["collectors"].items() if k != "nvml"}


def test_no_pynvml_is_a_reason_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)   # as if nvidia-ml-py were not installed
    assert nvml.Nvml().open().startswith("pynvml not importable (")


def test_a_driver_without_devices_is_unavailable(fake):
    fake([])
    assert nvml.Nvml().open() == "no NVIDIA GPU (nvmlDeviceGetCount is 0)"
    fake(two_gpus(), init_error=12)
    assert nvml.Nvml().open() == "nvmlInit: NVML Shared Library Not Found"


def metrics(daemon: Daemon) -> str:
    with urllib.request.urlopen(f"http://{daemon.http.address}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.mark.service
def test_the_gpu_series_reach_the_daemons_metrics_under_dcgm_names(fake, tmp_path):
    """A fake GPU through a real agent, sender and daemon: DCGM-exporter's names, labels and types at
    /metrics, a failing field's reason beside them."""
    gpus = two_gpus()[:1]
    gpus[0].fail["nvmlDeviceGetTotalEnergyConsumption"] = 3
    fake(gpus)
    daemon = Daemon(DaemonConfig(db=str(tmp_path / "g.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
                    jobs=[]).start()
    cfg = AgentConfig(node="n", spool=str(tmp_path / "spool"), daemon=daemon.endpoint, units=False)
    sender = Sender(cfg).start()
    try:
        agent = Agent(cfg, sender)
        sender.send("hello", agent.open())
        agent.sample_slow()
        agent.flush_batches()
        assert sender.flush(30)
        text = metrics(daemon)
    finally:
        sender.close()
        daemon.stop()
    g = gpus[0]
    where = f'UUID="{g.uuid}",gpu="0",modelName="{g.model}",node="n",scope="node"'
    assert f"DCGM_FI_DEV_GPU_UTIL{{{where}}} 37.0" in text
    assert f"DCGM_FI_DEV_POWER_USAGE{{{where}}} 61.456" in text
    assert f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{where}}} 3.0" in text
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text and "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL untyped" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" not in text
    assert ('causewatch_gpu_field_failure_info{field="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",gpu="0",node="n",'
            'reason="NVMLError_NotSupported: Not Supported",scope="node"} 1.0') in text
    assert 'node_scrape_collector_success{collector="nvml",node="n",scope="node"} 1.0' in text


def test_agent_check_names_a_failing_field_under_its_collector(fake, tmp_path, capsys, monkeypatch):
    gpus = two_gpus()
    gpus[0].fail["nvmlDeviceGetPowerUsage"] = 3
    fake(gpus)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["agent", "--check", "--node", "n"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["nvml"])
    assert lines[at].split() == ["nvml", "every", "10", "s", "ok"]
    assert lines[at + 1] == "    DCGM_FI_DEV_POWER_USAGE: NVMLError_NotSupported: Not Supported (gpu 0)"

"""The agent's main loop: collectors on a fixed, non-drifting schedule, batched into wire frames.

Target counters every `counters_interval`, the target's psutil and system-wide counters every `psutil_interval`, the
node collectors (`causewatch/agent/node/`) each at its own interval on that tick, the node's busiest other
processes (`neighbours.py`) every few seconds,
the IP-sample rings drained every counters tick; one `samples` frame per (scope, rate) per
`batch_seconds` (slow rows: at least 5 per frame). Task/region records from instrumented programs are
relayed from the ipc socket; `run_probe` commands run in a thread, a failure sent back as its reason;
SIGTERM flushes and returns.
A launched command and the processes it started are stopped with the agent (SIGTERM, then SIGKILL); the
command also when the agent is killed.
"""

from __future__ import annotations

import logging
import math
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import msgpack
import psutil
import zmq

from causewatch import __version__, wire
from causewatch.agent import cgroups, perf
from causewatch.agent.command import command_name
from causewatch.agent.instrument import environment, listening
from causewatch.agent.ipsampler import BBVCollector
from causewatch.agent.neighbours import TopProcesses
from causewatch.agent.node.nvml import GpuUse
from causewatch.agent.node.schedule import NodeCollectors, default_specs
from causewatch.agent.system import ProcessCollector
from causewatch.agent.unitwatch import UnitWatch, slurm_installed
from causewatch.config import AgentConfig
from causewatch.errors import CausewatchError, InputError, WireError
from causewatch.systemd import sd_notify

log = logging.getLogger(__name__)
CGROUP_ROOTS = ("/sys/fs/cgroup/perf_event", "/sys/fs/cgroup/unified", "/sys/fs/cgroup")
GPU_RATE = "slow:gpu"   # the units' GPU use: a batch of its own, as NVML runs less often than the units tick


@dataclass
class Target:
    """What the agent watches besides the node: a process (tree) or a cgroup."""
    label: str
    pid: int | None = None
    cgroup: str | None = None
    child: subprocess.Popen | None = None
    _release: int | None = field(default=None, repr=False)

    def release(self) -> None:
        """Let a launched command exec, once its counters are open (they follow it across exec)."""
        if self._release is not None:
            os.write(self._release, b"go")
            os.close(self._release)
            self._release = None

    def stop(self, grace: float) -> int | None:
        """Stop a launched command and every process it started that still runs: SIGTERM, then SIGKILL
        after `grace` seconds; returns its exit code (None when nothing was launched)."""
        if self.child is None:
            return None
        try:   # read before the command goes: its orphans leave its tree
            tree = psutil.Process(self.child.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        if self.child.poll() is None or tree:
            log.info("stopping %s (pid %d, %d processes under it): SIGTERM, SIGKILL after %.0f s", self.label,
                     self.child.pid, len(tree), grace)
            deadline = time.monotonic() + grace
            _signal_all(tree, signal.SIGTERM)
            self.child.terminate()
            try:
                self.child.wait(grace)
            except subprocess.TimeoutExpired:
                self.child.kill()
                self.child.wait()
            _, alive = psutil.wait_procs(tree, timeout=max(0.0, deadline - time.monotonic()))
            _signal_all(alive, signal.SIGKILL)
        return self.child.returncode


def _signal_all(procs: list, signum: int) -> None:
    for p in procs:
        try:
            p.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def launch(cmd: list[str], leave_running: bool = False, cfg: AgentConfig | None = None,
           config_file: str | None = None) -> Target:
    """Start `cmd` held before exec, so the agent opens counters before its first instruction; its
    environment tells an instrumented program where this agent (and its daemon and spool) are. Its
    scope is `command.command_name(cmd)`: `cmd:train.py` for `python3 train.py`, not `cmd:python3`.

    Unless `leave_running`, the command gets SIGTERM when the agent dies, even by SIGKILL
    (PR_SET_PDEATHSIG, which survives the exec)."""
    if shutil.which(cmd[0]) is None:
        raise InputError(f"cannot run {cmd[0]!r}: not found or not executable")
    r, w = os.pipe()
    # a trampoline waits on the pipe, then execs: Popen itself returns only after an exec
    tie = "" if leave_running else "import ctypes; ctypes.CDLL(None).prctl(1, 15); "   # PR_SET_PDEATHSIG, SIGTERM
    hold = f"import os, sys; {tie}os.read({r}, 2); os.execvp(sys.argv[1], sys.argv[1:])"
    try:
        env = {**os.environ, **environment(cfg, config_file)} if cfg is not None else None
        child = subprocess.Popen([sys.executable, "-c", hold, *cmd], pass_fds=(r,), env=env)
    finally:
        os.close(r)
    return Target(command_name(cmd), pid=child.pid, child=child, _release=w)


def find_target(pid: int | None = None, match: str | None = None, cgroup: str | None = None) -> Target | None:
    if pid is not None:
        if not psutil.pid_exists(pid):
            raise InputError(f"--pid {pid}: no such process")
        return Target(f"pid:{pid}", pid=pid)
    if match is not None:
        me = os.getpid()
        found = [p for p in psutil.process_iter(["name", "cmdline", "create_time"])
                 if p.pid != me and (p.info["name"] == match or
                                     os.path.basename((p.info["cmdline"] or [""])[0]) == match)]
        if not found:
            raise InputError(f"--match {match!r}: no process with that name or command")
        oldest = min(found, key=lambda p: p.info["create_time"])
        return Target(f"match:{match}", pid=oldest.pid)
    if cgroup is not None:
        candidates = [cgroup] if os.path.isabs(cgroup) else [os.path.join(r, cgroup) for r in CGROUP_ROOTS]
        for path in candidates:
            if os.path.isdir(path):
                return Target(f"cgroup:{cgroup}", cgroup=path)
        raise InputError(f"--cgroup {cgroup!r}: no such cgroup directory (looked in {', '.join(candidates)})")
    return None


class Batch:
    """Rows of one (scope, rate) until the next flush; metrics missing in a row are sent as null."""

    def __init__(self, scope: str):
        self.scope = scope
        self.t: list[float] = []
        self.rows: list[dict] = []

    def add(self, t: float, row: dict) -> None:
        if row:
            self.t.append(t)
            self.rows.append(row)

    def body(self) -> dict | None:
        if not self.rows:
            return None
        names = sorted({k for row in self.rows for k in row})
        values = [math.nan if (v := row.get(n)) is None else v for row in self.rows for n in names]
        t, self.t, self.rows = self.t, [], []
        return wire.samples_body(t, names, values, self.scope)


class Agent:
    """One node's agent. `sender` is anything with send(kind, body) / flush(timeout) / close();
    `run_probe(body) -> probe_result body` is handed in by the command that builds the agent (the
    agent never imports the probe); without it a run_probe command is logged and ignored."""

    def __init__(self, cfg: AgentConfig, sender, target: Target | None = None, batch_seconds: float = 1.0,
                 notify: Callable[[str], bool] = sd_notify, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic, proc: str = "/proc",
                 run_probe: Callable[[dict], dict] | None = None):
        self.cfg, self.sender, self.target, self.run_probe = cfg, sender, target, run_probe
        self.batch_seconds, self.notify = batch_seconds, notify
        self.clock, self.monotonic, self.proc = clock, monotonic, proc
        self.node_counters = perf.CounterCollector("system", proc=proc)
        self.node = NodeCollectors(default_specs(proc=proc, intervals=cfg.collector_intervals,
                                                 textfile_directory=cfg.textfile_directory), monotonic=monotonic)
        self.neighbours = TopProcesses(exclude=None if target is None else target.pid, proc=proc, clock=monotonic)
        self.target_counters = self.target_system = self.bbv = None
        if target is not None:
            if target.cgroup:
                self.target_counters = perf.CounterCollector("cgroup", cgroup=target.cgroup, proc=proc)
            else:
                self.target_counters = perf.CounterCollector("process", pid=target.pid, proc=proc)
                self.target_system = ProcessCollector(target.pid, clock=monotonic)
            if cfg.bbv_frequency > 0:   # 0 turns IP sampling off
                self.bbv = BBVCollector(target.label, pid=target.pid, cgroup=target.cgroup,
                                        frequency=cfg.bbv_frequency, proc=proc, wall=clock, monotonic=monotonic)
        self.units = unit_watch(cfg, proc, clock) if cfg.units else None
        self.gpu_use = GpuUse()
        self._batches: dict[tuple[str, str], Batch] = {}
        self._relay: threading.Thread | None = None
        self._stop = StopSignal()
        self._relaying = threading.Event()
        self._probes: list[threading.Thread] = []
        self.relayed = 0
        self.refused = 0
        self._bound_ipc: str | None = None   # the ipc socket file this agent created
        self.hello: dict = {}

    # ---- start ----
    def open(self) -> dict:
        """Open every collector (what fails is a reason, not an error; the node collectors run once);
        returns the hello body."""
        counters = {f"node.{k}": v for k, v in self.node_counters.open().items()}
        if self.target_counters is not None:
            counters.update(self.target_counters.open())
            counters["bbv"] = self.bbv.open() if self.bbv else "off (bbv_frequency = 0)"
        counters.update(self.units.open() if self.units else {"units": "off (units = false)"})
        self.hello = {**hello_body(counters, self.target, self.cfg, self.proc), "collectors": self.node.open()}
        return self.hello

    def start(self) -> None:
        """Send hello, start relaying, then let a launched command run (so its first records find us)."""
        self.sender.send("hello", self.hello or self.open())
        self._relay = threading.Thread(target=self._relay_loop, name="causewatch-ipc", daemon=True)
        self._relay.start()
        self._relaying.wait(10)
        if self.target is not None:
            self.target.release()

    # ---- schedule ----
    def run(self, stop) -> int | None:
        """Sample until `stop` (a StopSignal or threading.Event) is set or a launched command ends;
        returns the command's exit code."""
        tick, slow = self.cfg.counters_interval, self.cfg.psutil_interval
        t0 = self.monotonic()
        # frames of at least 5 rows (and at least batch_seconds apart): each frame costs a spool write,
        # an ack and a delete, which at 1 Hz is most of the agent's cost
        fast_batch, slow_batch = max(self.batch_seconds, 5 * tick), max(self.batch_seconds, 5 * slow)
        due = {"fast": t0, "slow": t0, "batch": t0 + fast_batch, "slow_batch": t0 + slow_batch}
        watchdog = _watchdog_period()
        if watchdog:
            due["watchdog"] = t0
        self.notify("READY=1")
        code = None
        while not stop.is_set():
            now = self.monotonic()
            if now >= due["fast"]:
                self.sample_fast()
                due["fast"] = _next(due["fast"], tick, now)
            if now >= due["slow"]:
                self.sample_slow()
                due["slow"] = _next(due["slow"], slow, now)
            if now >= due["batch"]:
                self.flush_batches("fast")
                due["batch"] = _next(due["batch"], fast_batch, now)
            if now >= due["slow_batch"]:
                self.flush_batches("slow")
                due["slow_batch"] = _next(due["slow_batch"], slow_batch, now)
            if watchdog and now >= due["watchdog"]:
                self.notify("WATCHDOG=1")
                due["watchdog"] = _next(due["watchdog"], watchdog, now)
            if self.target and self.target.child and self.target.child.poll() is not None:
                code = self.target.child.returncode
                log.info("%s exited with %s", self.target.label, code)
                break
            stop.wait(max(0.0, min(due.values()) - self.monotonic()))
        self.notify("STOPPING=1")
        return code

    def sample_fast(self) -> None:
        t = self.clock()
        if self.target_counters is not None:
            self._add(self.target.label, "fast", t, self.target_counters.collect())
        if self.bbv is not None:
            for body in self.bbv.collect():
                self.sender.send("bbv", body)

    def sample_slow(self) -> None:
        t = self.clock()
        # the agent's own delivery counts travel as samples: the daemon serves them (the agent serves nothing)
        own = {f"agent_{k}_total": float(v) for k, v in getattr(self.sender, "counts", {}).items()}
        row = {**self.node_counters.collect(), **own}
        for interval, values in self.node.collect().items():
            # collectors slower than this loop get batches of their own: a row of nulls between two runs
            # would hide their series at /metrics, which shows a batch's newest row
            if interval <= self.cfg.psutil_interval:
                row.update(values)
            else:
                self._add("node", f"slow:{interval:g}", t, values)
        self._add("node", "slow", t, row)
        self._add("node", f"slow:{self.neighbours.interval:g}", t, self.neighbours.collect())
        if self.target_system is not None:
            self._add(self.target.label, "slow", t, self.target_system.collect())
        if self.units is not None:
            self.sample_units(t)

    def sample_units(self, t: float) -> None:
        """The units' changes as records, their counters as rows, the jobs' phase vectors as bbv bodies; an
        ended unit's rows and vectors go before its end."""
        records, rows = self.units.tick()
        for scope, row in rows.items():
            self._add(scope, "slow", t, row)
        for body in self.units.vectors:
            self.sender.send("bbv", body)
        self._add_gpu_use(t)
        for body in records:
            for rate in ("slow", GPU_RATE) if body["event"] == "end" else ():
                batch = self._batches.pop((body["unit"], rate), None)
                last = batch.body() if batch else None
                if last is not None:
                    self.sender.send("samples", last)
            self.sender.send("unit", body)

    def _add_gpu_use(self, t: float) -> None:
        """The GPU use of the running units, from the processes of NVML's run this tick (none: no run)."""
        gpu = self.node.running("nvml")
        processes = gpu.take_processes() if gpu is not None else None
        if processes is not None:
            for unit, row in self.gpu_use.rows(processes, self._unit_name, self.units.running).items():
                self._add(unit, GPU_RATE, t, row)

    def _unit_name(self, pid: int) -> str | None:
        return self.units.unit_of(pid).get("unit")

    def _add(self, scope: str, rate: str, t: float, row: dict) -> None:
        self._batches.setdefault((scope, rate), Batch(scope)).add(t, row)

    def flush_batches(self, rate: str | None = None) -> None:
        """Send the rows of one rate ('fast' or 'slow', which includes the slower node collectors' 'slow:N'),
        or of all."""
        for (_, r), batch in self._batches.items():
            body = batch.body() if rate in (None, r, r.partition(":")[0]) else None
            if body is not None:
                self.sender.send("samples", body)

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Last samples and vectors out, relay stopped, sender flushed and closed; True if all acked."""
        self.sample_fast()
        if self.bbv is not None:
            for body in self.bbv.collect(final=True):
                self.sender.send("bbv", body)
        self.flush_batches()
        self._stop.set()
        if self._relay is not None:
            self._relay.join(5)
        if self._bound_ipc and os.path.exists(self._bound_ipc):
            os.unlink(self._bound_ipc)    # libzmq unlinks it only if its IO thread gets to run before exit
        deadline = self.monotonic() + timeout
        for probe in self._probes:   # the daemon asked for it: let a running probe finish and report
            if probe.is_alive():
                log.info("waiting up to %.0f s for a running probe before exit", timeout)
            probe.join(max(0.0, deadline - self.monotonic()))
        ok = self.sender.flush(max(1.0, deadline - self.monotonic()))
        if not ok:
            log.warning("%d frames not acked within %.0f s; they stay in the spool %s for the next run",
                        getattr(self.sender, "unacked", -1), timeout, Path(self.cfg.spool).expanduser())
        self.sender.close()
        for c in (self.node_counters, self.target_counters, self.bbv, self.node):
            if c is not None:
                c.close()
        counts = getattr(self.sender, "counts", {})
        refused = counts.get("frames_refused", 0)
        if refused and not counts.get("frames_acked", 0):
            raise CausewatchError(f"the daemon refused every frame this agent sent ({refused} nacks); nothing was "
                                  f"stored. Last reason: {self.sender.last_refusal}")
        return ok

    # ---- daemon commands ----
    def on_command(self, frame: wire.Frame) -> None:
        if frame.type == "run_probe" and self.run_probe is None:
            log.warning("run_probe %s/%s ignored: this agent was built without a probe runner",
                        frame.body.get("app"), frame.body.get("kit"))
        elif frame.type == "run_probe":
            probe = threading.Thread(target=self._run_probe, args=(frame.body,), name="causewatch-probe",
                                     daemon=True)
            self._probes.append(probe)
            probe.start()

    def _run_probe(self, body: dict) -> None:
        start = self.monotonic()
        try:
            result = self.run_probe(body)
        except Exception as e:   # a failing kit must not take the agent down, and the daemon hears why
            result = failed_probe(body, e, self.monotonic() - start)
            # a kit's own mistakes (an InputError naming them) need no traceback; anything else does
            log.warning("run_probe %s/%s failed: %s", body.get("app"), body.get("kit"), result["error"],
                        exc_info=not isinstance(e, CausewatchError))
        self.sender.send("probe_result", result)

    # ---- ipc relay of task/region records ----
    def _relay_loop(self) -> None:
        sock = zmq.Context.instance().socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            if listening(self.cfg.ipc):
                raise zmq.ZMQError(msg="another agent listens there")
            sock.bind(self.cfg.ipc)
            if self.cfg.ipc.startswith("ipc://"):
                self._bound_ipc = self.cfg.ipc[len("ipc://"):]
        except zmq.ZMQError as e:
            log.error("cannot relay task records on %s: %s; give this agent another --ipc ipc:///PATH (and its "
                      "programs CAUSEWATCH_IPC=ipc:///PATH)", self.cfg.ipc, e)
            sock.close()
            return
        finally:
            self._relaying.set()
        poller = zmq.Poller()   # no timeout: the thread sleeps until a record or the stop pipe wakes it
        poller.register(sock, zmq.POLLIN)
        poller.register(self._stop.fileno(), zmq.POLLIN)
        try:
            while True:
                poller.poll()
                while sock.poll(0):
                    self.relay(sock.recv())
                if self._stop.is_set():
                    return
        finally:
            sock.close()

    def relay(self, data: bytes) -> bool:
        """Forward one {type, body} record from an instrumented program after checking it."""
        try:
            msg = msgpack.unpackb(data, raw=False)
            kind, body = msg["type"], msg["body"]
            if kind not in ("task", "region"):
                raise WireError("type", f"{kind!r} is not task or region", "type")
            wire.decode(wire.encode(kind, self.cfg.node, "check", 1, body))
        except (WireError, KeyError, TypeError, ValueError, msgpack.UnpackException) as e:
            self.refused += 1
            log.warning("refused a record from an instrumented program: %s: %s", type(e).__name__, e)
            return False
        body = self.tagged(body)
        self.sender.send(kind, body)
        if body.get("bbv"):   # the Python-level phase vector also joins the phase stream
            self.sender.send("bbv", {"target": f"app:{body['app']}", "kind": "python", "start": body["start"],
                                     "end": body["start"] + body["duration"], "vector": body["bbv"]})
        self.relayed += 1
        return True


    def tagged(self, body: dict) -> dict:
        """A task or region record with the unit (and Slurm job) its process runs in, in its extra: the
        daemon learns and judges a job's tasks as a scope of their own. A record that names its unit keeps it."""
        extra = body.get("extra") or {}
        pid = extra.get("pid")
        if self.units is None or not isinstance(pid, int) or "unit" in extra:
            return body
        tag = self.units.unit_of(pid)
        return {**body, "extra": {**extra, **tag}} if tag else body


MAX_REASON = 2000   # characters of a failed probe's reason sent to the daemon


def failed_probe(body: dict, error: Exception, seconds: float) -> dict:
    """The probe_result body of a run_probe that raised `error` after `seconds`."""
    reason = str(error) if isinstance(error, CausewatchError) else f"{type(error).__name__}: {error}"
    return {"app": body["app"], "kit": body["kit"], "error": reason[:MAX_REASON] or type(error).__name__,
            "probe_seconds": seconds}


def _next(due: float, period: float, now: float) -> float:
    """The next multiple of `period` after `due` that lies in the future: late ticks are skipped,
    never shifted, so the schedule does not drift."""
    return due + period * max(1, int((now - due) // period) + 1)


def _watchdog_period(env=os.environ) -> float | None:
    usec = env.get("WATCHDOG_USEC")
    if not usec or (env.get("WATCHDOG_PID") and env["WATCHDOG_PID"] != str(os.getpid())):
        return None
    return int(usec) / 2e6


def hello_body(counters: dict, target: Target | None, cfg: AgentConfig, proc: str = "/proc") -> dict:
    """Node facts and what can be counted (and why not) for the hello frame."""
    extra = {"counters_interval": cfg.counters_interval, "psutil_interval": cfg.psutil_interval,
             "bbv_frequency": cfg.bbv_frequency, "perf_event_paranoid": perf.paranoid(proc),
             "boot_id": _boot_id(proc)}
    if target is not None:
        extra["target"] = target.label
        if target.pid is not None:
            extra["pid"] = target.pid
    return {"hostname": socket.gethostname(), "agent_version": __version__, "cpu_model": _cpu_model(proc),
            "cores": os.cpu_count() or 0, "memory_bytes": psutil.virtual_memory().total,
            "counters": counters, "extra": extra}


def _boot_id(proc: str) -> str:
    """The machine's boot id (new at every boot): the daemon re-probes a node that rebooted."""
    try:
        with open(os.path.join(proc, "sys/kernel/random/boot_id")) as f:
            return f.read().strip()
    except OSError:
        return ""


def _cpu_model(proc: str) -> str:
    try:
        with open(os.path.join(proc, "cpuinfo")) as f:
            for line in f:
                if line.startswith(("model name", "Model", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def unit_watch(cfg: AgentConfig, proc: str = "/proc", clock: Callable[[], float] = time.time) -> UnitWatch:
    """The node's units as `cfg` says: under cgroup_root (or cgroup v2's mount), Slurm steps also by their
    processes on a node with Slurm; the running set kept beside the spool; each job IP-sampled as the target is."""
    root = cfg.cgroup_root or cgroups.find_root(os.path.join(proc, "self/mounts"))
    state = os.path.join(os.path.expanduser(cfg.spool), "units.json")
    return UnitWatch(root, proc, slurm_installed(), state, clock, bbv_frequency=cfg.job_bbv_frequency)


class StopSignal:
    """A stop flag that a signal handler may set: a pipe, not a lock (threading.Event.set inside a
    handler can deadlock against the main thread's own Event.wait)."""

    def __init__(self):
        self._r, self._w = os.pipe()
        os.set_blocking(self._w, False)
        self._set = False

    def set(self) -> None:
        self._set = True
        try:
            os.write(self._w, b"x")
        except BlockingIOError:
            pass   # a wake-up is already pending

    def is_set(self) -> bool:
        return self._set

    def fileno(self) -> int:
        """Readable once set: for poll/select loops."""
        return self._r

    def wait(self, timeout: float) -> bool:
        if not self._set:
            select.select([self._r], [], [], timeout)
        return self._set


def install_signal_handlers(stop: StopSignal) -> None:
    """SIGTERM and SIGINT end the sampling loop; the caller then flushes and closes."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

"""Runs the node collectors at their own intervals, in a thread that a hung collector keeps to itself.

A collector that raises, or is still running at its deadline (its budget), gives node_scrape_collector_success 0 and
its reason (`unavailable`, and agent_collector_failure_info{collector,reason}); one still running when it
is next due is not started again until it returns, so a hung read stops only that collector. One whose
`open()` gives a reason (NVML on a node without a GPU) is unavailable: it never runs, and hello says why.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from causewatch import wire
from causewatch.agent.node import clock, cpufreq, kernel, network, nvml, release, storage, textfile
from causewatch.agent.node.files import name
from causewatch.config import NODE_COLLECTOR_INTERVALS

log = logging.getLogger(__name__)
MAX_REASON = 80   # characters of a reason in its label (the name must stay within wire.MAX_NAME)
# seconds; the rest 0.25 (NVML: ~15 calls a GPU, 8 GPUs a node; textfile: files of up to a MiB to parse)
BUDGETS = {"filesystem": 2.0, "nvml": 1.0, "textfile": 1.0}


@dataclass
class Spec:
    collector: object   # .name and .collect() -> {labelled name: value}; optional .open() -> reason | None,
    #                     .field_states() -> {field: reason}, .close()
    interval: float     # seconds between runs
    budget: float       # seconds a run may take before it counts as failed
    off: str | None = None   # why the config turns it off otherwise than by its interval


def default_specs(proc: str = "/proc", sys: str = "/sys", intervals: dict[str, float] = NODE_COLLECTOR_INTERVALS,
                  textfile_directory: str | None = None) -> list[Spec]:
    """Every collector with its interval (`intervals`, by name: the config's; 0 = off) and its budget;
    textfile is off without a `textfile_directory`."""
    collectors = [kernel.Stat(proc), kernel.LoadAvg(proc), kernel.MemInfo(proc), kernel.VmStat(proc),
                  kernel.Pressure(proc), kernel.FileFd(proc), kernel.Entropy(proc), storage.DiskStats(proc),
                  storage.Filesystems(proc), network.NetDev(proc), network.NetClass(sys), network.SoftNet(proc),
                  network.NetStat(proc), network.SockStat(proc), network.Arp(proc), network.UdpQueues(proc),
                  network.Conntrack(proc), cpufreq.CpuFreq(sys), clock.Time(sys), clock.Timex(), release.Uname(proc),
                  release.OsRelease(), release.SELinux(sys), nvml.Nvml(), textfile.Textfile(textfile_directory or "")]
    specs = [Spec(c, intervals[c.name], budget=BUDGETS.get(c.name, 0.25)) for c in collectors]
    if textfile_directory is None:
        specs[-1].interval, specs[-1].off = 0.0, "no textfile_directory"
    return specs


class _Worker:
    """One collector, its next due time and its last run's (values, reason, seconds)."""

    def __init__(self, spec: Spec):
        self.spec = spec
        self.due = 0.0
        self.running = False
        self.result: tuple[dict, str | None, float] = ({}, None, 0.0)

    def call(self) -> None:
        self.running = True
        t0 = time.perf_counter()
        try:
            values, reason = self.spec.collector.collect(), None
        except Exception as e:   # a collector's own bug, too, must stop only that collector
            values, reason = {}, f"{type(e).__name__}: {e}"
        self.result = (values, reason, time.perf_counter() - t0)
        self.running = False


class _Lane:
    """A thread that runs lists of collectors in turn: one hand-over a tick, not one per collector (15
    hand-overs had cost four times what the collectors did). A lane stuck in a collector is abandoned:
    its thread ends once that call returns, and a new lane takes the rest."""

    def __init__(self, monotonic):
        self.monotonic = monotonic
        self.cond = threading.Condition()
        self.jobs: list[_Worker] | None = None   # handed to the thread
        self.running: list[_Worker] = []          # what it runs, for the budgets
        self.position, self.started, self.done = 0, 0.0, True
        self.abandoned = False
        threading.Thread(target=self._loop, name="causewatch-node", daemon=True).start()

    def run(self, jobs: list[_Worker]) -> None:
        with self.cond:
            self.jobs, self.running, self.position, self.started, self.done = jobs, jobs, 0, self.monotonic(), False
            self.cond.notify_all()

    def wait(self) -> int | None:
        """Until the run ends (None) or a collector passes its budget (its index in the run)."""
        with self.cond:
            while not self.done:
                i = self.position
                left = self.started + self.running[i].spec.budget - self.monotonic()
                if left <= 0:
                    self.abandoned = True
                    return i
                self.cond.wait(left)
        return None

    def close(self) -> None:
        with self.cond:
            self.abandoned = True
            self.cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while self.jobs is None and not self.abandoned:
                    self.cond.wait()
                if self.abandoned:
                    return
                jobs, self.jobs = self.jobs, None
            for i, w in enumerate(jobs):
                with self.cond:
                    self.position, self.started = i, self.monotonic()
                w.call()
                if self.abandoned:
                    return
            with self.cond:
                self.position, self.done = len(jobs), True
                self.cond.notify_all()


class NodeCollectors:
    """The node collectors of `specs` (those of interval 0 are off); `collect()` runs those due and returns
    their rows by interval."""

    def __init__(self, specs: list[Spec], monotonic=time.monotonic):
        self.monotonic = monotonic
        self.unavailable: dict[str, str] = {}
        self.off = {s.collector.name: f"off: {s.off}" if s.off else f"off (collector_intervals.{s.collector.name} = 0)"
                    for s in specs if s.interval <= 0 or s.off}   # name -> its state in hello
        self.absent: dict[str, tuple[float, str]] = {}   # unavailable here: name -> (interval, why)
        self._workers = [_Worker(s) for s in specs if s.interval > 0 and not s.off]
        self._opened = False
        self._valid: set[str] = set()
        self._lane: _Lane | None = None
        self._first: dict[float, dict[str, float]] = {}   # open()'s rows, sent with the first collect()

    @property
    def names(self) -> list[str]:
        return [w.spec.collector.name for w in self._workers]

    def running(self, collector: str):
        """The collector of that name if it runs here (on and available), else None."""
        return next((w.spec.collector for w in self._workers if w.spec.collector.name == collector), None)

    def _open_collectors(self) -> None:
        """Once: the collectors whose open() gives a reason leave the schedule, their reason kept."""
        self._opened = True
        for w in list(self._workers):
            opener = getattr(w.spec.collector, "open", None)
            reason = opener() if opener is not None else None
            if reason is not None:
                log.info("node collector %s is unavailable here: %s", w.spec.collector.name, reason)
                self.absent[w.spec.collector.name] = (w.spec.interval, reason)
                self._workers.remove(w)

    def open(self) -> dict[str, dict]:
        """Run every collector once, as hello says how each fared (its rows go with the first collect()):
        {name: {"interval": seconds, "state": "ok" | reason}}, "off" for one of interval 0."""
        self._first = self.collect()
        return self.states()

    def states(self) -> dict[str, dict]:
        """{name: {"interval", "state"}} and, for a collector whose fields fail one by one, {field: reason}."""
        states = {}
        for w in self._workers:
            c = w.spec.collector
            fields = c.field_states() if hasattr(c, "field_states") else {}
            states[c.name] = {**fields, "interval": w.spec.interval, "state": self.unavailable.get(c.name, "ok")}
        states.update({name: {"interval": interval, "state": f"unavailable: {reason}"}
                       for name, (interval, reason) in self.absent.items()})
        states.update({name: {"interval": 0.0, "state": state} for name, state in self.off.items()})
        return states

    def collect(self) -> dict[float, dict[str, float]]:
        if not self._opened:
            self._open_collectors()
        rows, self._first = self._first, {}
        self._run_due(rows)
        return rows

    def _run_due(self, rows: dict[float, dict[str, float]]) -> None:
        now = self.monotonic()
        jobs = []
        for w in (w for w in self._workers if now >= w.due):
            w.due = now + w.spec.interval if w.due == 0 else _next(w.due, w.spec.interval, now)
            if w.running:
                self._report(rows, w, {}, f"still running (budget {w.spec.budget:g} s); not started again "
                                          "until it returns", None)
            else:
                jobs.append(w)
        while jobs:
            self._lane = self._lane or _Lane(self.monotonic)
            self._lane.run(jobs)
            hung = self._lane.wait()
            for w in jobs[:hung]:
                self._report(rows, w, *w.result)
            if hung is None:
                break
            self._report(rows, jobs[hung], {}, f"over its budget of {jobs[hung].spec.budget:g} s", None)
            self._lane, jobs = None, jobs[hung + 1:]

    def _report(self, rows: dict, w: _Worker, values: dict, reason: str | None, seconds: float | None) -> None:
        row = rows.setdefault(w.spec.interval, {})
        collector = w.spec.collector.name
        if not self._valid.issuperset(values):
            values, dropped = self._checked(values)
            if dropped and reason is None:
                reason = f"{dropped} series left out: names over {wire.MAX_NAME} characters"
        row.update(values)
        row[name("node_scrape_collector_success", ("collector", collector))] = float(reason is None)
        if seconds is not None:
            row[name("node_scrape_collector_duration_seconds", ("collector", collector))] = seconds
        if reason is None:
            if self.unavailable.pop(collector, None) is not None:
                log.info("node collector %s works again", collector)
            return
        if self.unavailable.get(collector) != reason:
            log.warning("node collector %s failed: %s", collector, reason)
        self.unavailable[collector] = reason
        row[name("agent_collector_failure_info", ("collector", collector), ("reason", reason[:MAX_REASON]))] = 1.0

    def _checked(self, values: dict) -> tuple[dict, int]:
        """(`values` without the names the wire refuses, as a mount point too long for one, how many left out);
        a name that passed is not checked again."""
        kept = {}
        for metric, value in values.items():
            if metric in self._valid or (len(metric) <= wire.MAX_NAME and wire.METRIC_NAME.fullmatch(metric)):
                self._valid.add(metric)
                kept[metric] = value
        return kept, len(values) - len(kept)

    def close(self) -> None:
        if self._lane is not None:
            self._lane.close()
        for w in self._workers:
            closer = getattr(w.spec.collector, "close", None)
            if closer is not None:
                closer()


def _next(due: float, period: float, now: float) -> float:
    """The next multiple of `period` after `due` in the future: late runs are skipped, never shifted."""
    return due + period * max(1, int((now - due) // period) + 1)

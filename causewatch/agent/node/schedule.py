"""Runs the node collectors at their own intervals, in a thread that a hung collector keeps to itself.

A collector that raises, or is still running at its deadline (its budget), gives node_scrape_collector_success 0 and
its reason (`unavailable`, and agent_collector_failure_info{collector,reason}); one still running when it
is next due is not started again until it returns, so a hung read stops only that collector.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from causewatch import wire
from causewatch.agent.node import clock, cpufreq, kernel, network, release, storage
from causewatch.agent.node.files import name

log = logging.getLogger(__name__)
MAX_REASON = 80   # characters of a reason in its label (the name must stay within wire.MAX_NAME)


@dataclass
class Spec:
    collector: object   # .name and .collect() -> {labelled name: value}
    interval: float     # seconds between runs
    budget: float       # seconds a run may take before it counts as failed


def default_specs(proc: str = "/proc", sys: str = "/sys", intervals: dict[str, float] | None = None) -> list[Spec]:
    """Every collector with its default interval and budget; `intervals` overrides by name (0: off)."""
    fast, slow, rare = 1.0, 10.0, 60.0
    table = [(kernel.Stat(proc), fast), (kernel.LoadAvg(proc), fast), (kernel.MemInfo(proc), fast),
             (kernel.VmStat(proc), fast), (kernel.Pressure(proc), fast), (kernel.FileFd(proc), fast),
             (kernel.Entropy(proc), slow), (storage.DiskStats(proc), fast), (storage.Filesystems(proc), slow),
             (network.NetDev(proc), fast), (network.NetClass(sys), slow), (network.SoftNet(proc), fast),
             (network.NetStat(proc), fast), (network.SockStat(proc), fast), (network.Arp(proc), slow),
             (network.UdpQueues(proc), slow), (network.Conntrack(proc), fast), (cpufreq.CpuFreq(sys), slow),
             (clock.Time(sys), slow), (clock.Timex(), slow), (release.Uname(proc), rare), (release.OsRelease(), rare),
             (release.SELinux(sys), rare)]
    intervals = intervals or {}
    specs = [Spec(c, intervals.get(c.name, every), budget=2.0 if c.name == "filesystem" else 0.25)
             for c, every in table]
    return [s for s in specs if s.interval > 0]


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
    """The node collectors of `specs`; `collect()` runs those due and returns their rows by interval."""

    def __init__(self, specs: list[Spec], monotonic=time.monotonic):
        self.monotonic = monotonic
        self.unavailable: dict[str, str] = {}
        self._workers = [_Worker(s) for s in specs]
        self._valid: set[str] = set()
        self._lane: _Lane | None = None

    @property
    def names(self) -> list[str]:
        return [w.spec.collector.name for w in self._workers]

    def collect(self) -> dict[float, dict[str, float]]:
        now = self.monotonic()
        rows: dict[float, dict[str, float]] = {}
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
        return rows

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


def _next(due: float, period: float, now: float) -> float:
    """The next multiple of `period` after `due` in the future: late runs are skipped, never shifted."""
    return due + period * max(1, int((now - due) // period) + 1)

"""Auto-probing: run_probe to a node for each registered kit it has no result for, whose result was
taken under other facts (a new boot, other hardware), whose last probe failed (at its hello), or whose
result is older than `reprobe_after`.

run() re-asks connected nodes on that schedule and republishes each node's prediction as `rank` gives it:
causewatch_predicted_task_seconds{app,node} per task, causewatch_predicted_run_task_seconds{app,node} per run.
"""

from __future__ import annotations

import logging
import time

from causewatch.daemon import readers, store
from causewatch.daemon.exporter import gauge_family
from causewatch.daemon.jobs import Job, JobContext
from causewatch.probe.rank import rank_nodes

log = logging.getLogger("causewatch.daemon.job_probe")
GAUGE = "causewatch_predicted_task_seconds"
GAUGE_HELP = "Seconds per task of an application on a node, predicted by its latest software probe (as rank)"
RUN_GAUGE = "causewatch_predicted_run_task_seconds"
RUN_HELP = "Task-seconds (the sum of task times) of one run of an application's probe kit on a node, predicted"
LABELS = ["app", "node"]


def changed_facts(then: dict | None, now: dict | None) -> list[str]:
    """Which facts differ between a result's and the node's now, as 'cores 2 -> 4'; a result stored
    before facts were recorded (None) has none to compare."""
    if not then or not now:
        return []
    return [f"{key} {then.get(key)!r} -> {now.get(key)!r}" for key in now if then.get(key) != now.get(key)]


class ProbeJob(Job):
    """`reprobe_after` seconds: a result that old is taken again (0: only new nodes and changed facts);
    `interval`: how often the schedule is checked and the gauge republished."""
    name = "probe"

    def __init__(self, reprobe_after: float = 86400.0, interval: float = 15.0):
        self.reprobe_after = reprobe_after
        self.interval = interval
        # (node, app, kit) -> when run_probe was last sent: the schedule does not ask again while a
        # probe may still be running, and asks again `reprobe_after` later if its result never came.
        self.asked_: dict[tuple[str, str, str], float] = {}

    def _stale(self, since: float, now: float) -> str | None:
        if self.reprobe_after and now - since >= self.reprobe_after:
            return f"{now - since:.0f} s since the last probe (reprobe_after {self.reprobe_after:g} s)"
        return None

    def _ask(self, ctx: JobContext, node: str, kit: dict, why: str, now: float) -> None:
        sent = ctx.send(node, "run_probe", {"app": kit["app"], "kit": kit["kit"], "manifest": kit["manifest"]})
        if sent:
            self.asked_[(node, kit["app"], kit["kit"])] = now
        # a node not connected since the daemon started is tried at every check: say so only when debugging
        log.log(logging.INFO if sent else logging.DEBUG, "run_probe %s/%s -> %s (%s): %s", kit["app"], kit["kit"],
                node, why, "sent" if sent else "not connected")

    def on_hellos(self, ctx: JobContext, hellos: list[tuple[str, dict]]) -> None:
        """A new node gets every kit; a known one those whose newest result failed, was taken under other
        facts than its hello's, or is stale. A node's last hello of the burst speaks for it, by its own facts,
        not the node's row: hellos of one batch are all stored before the first is handled, and an
        unchanged one judged by a later one's facts sent a second run_probe."""
        now = time.time()
        latest = dict(hellos)
        with ctx.read() as cur:
            kits = readers.probes.registered_kits(cur)
            newest = readers.probes.newest_probes(cur, list(latest)) if kits else {}
        for node, body in latest.items():
            facts = store.results.hello_facts(body)
            for kit in kits:
                result = newest.get((node, kit["app"], kit["kit"]))
                if result is None:
                    why = "no result yet"
                elif result["error"]:   # the node may have been mended since (a module installed, a path set)
                    why = "its last probe failed"
                else:
                    changed = changed_facts(result["facts"], facts)
                    why = "facts changed: " + ", ".join(changed) if changed else self._stale(result["ts"], now)
                if why:
                    self._ask(ctx, node, kit, why, now)

    def run(self, ctx: JobContext) -> None:
        """Ask the nodes this daemon has heard from again when their newest result (or unanswered
        request) is older than reprobe_after; a kit registered while they run reaches them here too."""
        now = time.time()
        with ctx.read() as cur:
            latest = {app: readers.probes.latest_probes(cur, app) for app in readers.probes.probed_apps(cur)}
            nodes, newest = readers.report.nodes(cur), readers.probes.newest_probes(cur)
            kits = readers.probes.registered_kits(cur)
        for node in (n["node"] for n in nodes):
            for kit in kits:
                key = (node, kit["app"], kit["kit"])
                result, asked = newest.get(key), self.asked_.get(key)
                if result is None and asked is None:
                    why = "no result yet"
                else:
                    why = self._stale(max(result["ts"] if result else asked, asked or 0.0), now)
                if why:
                    self._ask(ctx, node, kit, why, now)
        ctx.exporter.publish(self.name, predicted_families(latest, kits, now))


def predicted_families(latest: dict[str, list[dict]], kits: list[dict], now: float) -> list:
    """The gauges of each node's newest prediction for each app ({app: latest_probes rows}), ranked as
    the `rank` verb ranks them: per task (none for a result whose kit is no longer registered, which
    gives no task count) and per run of the kit."""
    ranked = [n for app, rows in latest.items() for n in rank_nodes(app, rows, kits, now)]
    per_task = [(n, n["task_seconds"]) for n in ranked if n["task_seconds"] is not None]
    per_run = [(n, n["run_task_seconds"]) for n in ranked]
    return [gauge_family(GAUGE, GAUGE_HELP, LABELS, per_task), gauge_family(RUN_GAUGE, RUN_HELP, LABELS, per_run)]

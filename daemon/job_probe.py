"""Auto-probing: a node's hello gets a run_probe for every registered kit it has no result for.

run() republishes causewatch_predicted_task_seconds{app,node} from the latest probe results.
Kits are registered offline (`causewatch probe register`, daemon stopped) into probe_kits.
"""

from __future__ import annotations

import logging

from causewatch.probe.rank import predicted_times
from causewatch.probe.registry import registered_kits

log = logging.getLogger("causewatch.daemon.job_probe")
GAUGE = "causewatch_predicted_task_seconds"
GAUGE_HELP = "Task-seconds of an application's whole run on a node, predicted by its latest software probe"


class Job:
    name = "probe"
    interval = 15.0

    def on_hello(self, ctx, node: str, body: dict) -> None:
        """Send the kits this node has no result for: a new node gets them all, a restarted agent
        whose probe never came back gets it again (agents say hello once per start)."""
        con = ctx.read()
        done = set(con.execute("SELECT DISTINCT app, kit FROM probe_results WHERE node = ?", [node]).fetchall())
        for kit in registered_kits(con):
            if (kit["app"], kit["kit"]) in done:
                continue
            sent = ctx.send(node, "run_probe", {"app": kit["app"], "kit": kit["kit"], "manifest": kit["manifest"]})
            log.info("run_probe %s/%s -> %s: %s", kit["app"], kit["kit"], node, "sent" if sent else "not sent")

    def run(self, ctx) -> None:
        rows = predicted_times(ctx.read())
        ctx.metrics.clear(GAUGE)
        for app, node, seconds in rows:
            ctx.metrics.set_gauge(GAUGE, GAUGE_HELP, {"app": app, "node": node}, seconds)

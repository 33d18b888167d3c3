"""Auto-probing: a node's hello gets a run_probe for every registered kit it has no result for.

run() republishes causewatch_predicted_task_seconds{app,node} from the latest probe results.
Kits are registered offline (`causewatch probe register`, daemon stopped) into probe_kits.
"""

from __future__ import annotations

import logging

from causewatch.daemon import tables
from causewatch.daemon.exporter import gauge_family
from causewatch.daemon.jobs import JobContext

log = logging.getLogger("causewatch.daemon.job_probe")
GAUGE = "causewatch_predicted_task_seconds"
GAUGE_HELP = "Task-seconds of an application's whole run on a node, predicted by its latest software probe"


class ProbeJob:
    name = "probe"
    interval = 15.0

    def on_hello(self, ctx: JobContext, node: str, body: dict) -> None:
        """Send the kits this node has no result for: a new node gets them all, a restarted agent
        whose probe never came back gets it again (agents say hello once per start)."""
        with ctx.read() as cur:
            done, kits = tables.probed_kits(cur, node), tables.registered_kits(cur)
        for kit in kits:
            if (kit["app"], kit["kit"]) in done:
                continue
            sent = ctx.send(node, "run_probe", {"app": kit["app"], "kit": kit["kit"], "manifest": kit["manifest"]})
            log.info("run_probe %s/%s -> %s: %s", kit["app"], kit["kit"], node, "sent" if sent else "not sent")

    def run(self, ctx: JobContext) -> None:
        with ctx.read() as cur:
            rows = tables.predicted_times(cur)
        series = [({"app": app, "node": node}, seconds) for app, node, seconds in rows]
        ctx.exporter.publish(self.name, [gauge_family(GAUGE, GAUGE_HELP, ["app", "node"], series)])

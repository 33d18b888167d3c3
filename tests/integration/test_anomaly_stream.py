"""A real daemon fed a task stream whose generating DAG changes mid-stream (task time starts to depend
on the problem size directly, beyond the instructions and misses it caused before) raises exactly
that anomaly, serves it on /api/anomalies and /metrics, and resolves it when the change is undone."""

import json
import re
import urllib.request

import numpy as np
from support import agent_config, lu_cycle

from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.server import Daemon


def test_a_changed_dependency_is_raised_then_resolved(tmp_path):
    job = CausalJob(min_rows=50, min_new=20, max_rows=400)
    # the lifecycle, not the jobs worker's priority (tests/daemon/test_worker.py): at SCHED_IDLE beside a
    # loaded machine's loops its learns waited minutes
    daemon = Daemon(DaemonConfig(db=str(tmp_path / "cw.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0",
                                 analysis_nice=0), jobs=[job]).start()
    sender = Sender(agent_config(tmp_path, daemon.endpoint, node="n1")).start()
    http = f"http://{daemon.http.address}"
    rng = np.random.default_rng(11)

    def cycle(count: int, changed: bool) -> list[dict]:
        return lu_cycle(daemon, sender, rng, count, changed)

    try:
        assert cycle(300, False) == [] and cycle(40, False) == []     # a model, then a stable baseline
        for _ in range(3):
            opened = cycle(80, True)
        # one voice: one anomaly of the task time, the new dependency on n among its related findings
        [changed] = opened
        assert changed["dst"] == "duration" and changed["evidence"]["score"] > changed["evidence"]["threshold"]
        related = {(r["kind"], r["src"], r["dst"]) for r in changed["evidence"]["related"]}
        assert ("markov_violation", "n", "duration") in related | {(changed["kind"], changed["src"], "duration")}
        assert all({s, d} & {"n", "duration"} for _, s, d in related)   # nothing else departs
        with urllib.request.urlopen(f"{http}/metrics", timeout=10) as reply:
            assert re.search(r'causewatch_dependency_anomaly\{cause="duration",dst="duration",evidence="duration '
                             r'[^"]+",kind="' + changed["kind"] + r'",scope="app:lu",src="[^"]+"\} 1.0',
                             reply.read().decode())
        for _ in range(8):
            still = cycle(80, False)
        assert still == []
        with urllib.request.urlopen(f"{http}/api/anomalies", timeout=10) as reply:
            assert all(a["resolved"] is not None for a in json.load(reply))
    finally:
        sender.close()
        daemon.stop()

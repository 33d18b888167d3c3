"""Tests of the auto-probe job: run_probe on a new node's hello, the predicted-time gauge, and the
whole loop through a real daemon and agent sender (hello -> run_probe -> probe_result -> /api/rank)."""

import json
import queue
import urllib.request

import duckdb
from support import agent_config, wait_for

from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.job_probe import Job
from causewatch.daemon.metrics import LatestState
from causewatch.daemon.scheduler import JobContext
from causewatch.daemon.server import Daemon
from causewatch.daemon.store import migrate
from causewatch.probe.registry import register_kit
from causewatch.probe.run import handle_run_probe

HELLO = {"hostname": "h", "agent_version": "test"}


def manifest(kit="k1"):
    task = {"id": "t", "type": "dict", "size": 500, "seed": 1}
    return {"format": "causewatch-probe-kit/1", "app": "mw", "kit": kit,
            "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"},
            "reference_seconds": 10.0, "reference_lo": 9.0, "reference_hi": 11.0, "warmup": 0, "repeats": 2,
            "phases": [{"phase": 0, "weight": 1.0, "input": task,
                        "ref_seconds": 0.001, "ref_lo": 0.0009, "ref_hi": 0.0011}]}


def context(con, sent):
    return JobContext(read=con.cursor, write=lambda fn: fn(con),
                      send=lambda node, kind, body: sent.append((node, kind, body)) or True, metrics=LatestState())


def test_hello_from_a_new_node_gets_every_kit_it_has_no_result_for(tmp_path):
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    migrate(con)
    register_kit(con, manifest("k1"))
    register_kit(con, manifest("k2"))
    sent = []
    ctx = context(con, sent)
    Job().on_hello(ctx, "n1", HELLO)
    assert sorted((n, k, b["kit"]) for n, k, b in sent) == [("n1", "run_probe", "k1"), ("n1", "run_probe", "k2")]
    assert sent[0][2]["manifest"]["phases"] == manifest()["phases"]
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, "
                "ratio, probe_seconds, phases) "
                "VALUES ('n1', 'b', 1, 1.0, 'mw', 'k1', 12.0, 11.0, 13.0, 1.2, 0.5, NULL)")
    sent.clear()
    Job().on_hello(ctx, "n1", HELLO)
    assert [b["kit"] for _, _, b in sent] == ["k2"]
    Job().run(ctx)
    text = ctx.metrics.exposition().decode()
    assert 'causewatch_predicted_task_seconds{app="mw",node="n1"} 12.0' in text


def test_new_agent_is_probed_and_ranked(tmp_path):
    db = tmp_path / "cw.duckdb"
    with duckdb.connect(str(db)) as con:
        migrate(con)
        register_kit(con, manifest())
    daemon = Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
                    jobs=[Job()]).start()
    commands: queue.Queue = queue.Queue()
    sender = Sender(agent_config(tmp_path, daemon.endpoint, node="fresh-node"), on_command=commands.put).start()
    try:
        sender.send("hello", HELLO)
        frame = commands.get(timeout=30)
        assert frame.type == "run_probe" and frame.body["kit"] == "k1"
        sender.send("probe_result", handle_run_probe(frame.body))
        assert sender.flush(30)
        url = f"http://{daemon.http.address}/api/rank?app=mw"

        def ranked():
            with urllib.request.urlopen(url, timeout=5) as reply:
                return json.load(reply)["nodes"]
        nodes = wait_for(ranked, timeout=15)
        assert [n["node"] for n in nodes] == ["fresh-node"]
        assert nodes[0]["lo"] <= nodes[0]["predicted_seconds"] <= nodes[0]["hi"]
    finally:
        sender.close()
        daemon.stop()

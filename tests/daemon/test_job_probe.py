"""Tests of the auto-probe job: run_probe on a new node's hello, again under new facts or on schedule,
the predicted-time gauge, and the whole loop through a real daemon and agent sender
(hello -> run_probe -> probe_result -> /api/rank)."""

import json
import queue
import time
import urllib.request

import duckdb
import pytest
from support import agent_config, probe_daemon, wait_for

from causewatch import wire
from causewatch.agent.runner import hello_body
from causewatch.agent.sender import Sender
from causewatch.config import AgentConfig, DaemonConfig
from causewatch.daemon import readers
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_probe import ProbeJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.server import Daemon
from causewatch.daemon.store import Store, create_views, migrate
from causewatch.daemon.store.results import NODE_FACTS_SQL, hello_facts, register_kit
from causewatch.probe.registry import kit_row
from causewatch.probe.run import handle_run_probe

HELLO = {"hostname": "h", "agent_version": "test"}


def manifest(kit="k1"):
    task = {"id": "t", "type": "dict", "size": 500, "seed": 1}
    return {"format": "causewatch-probe-kit/1", "app": "mw", "kit": kit, "tasks": 10,
            "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"},
            "reference_seconds": 10.0, "reference_lo": 9.0, "reference_hi": 11.0, "warmup": 0, "repeats": 2,
            "phases": [{"phase": 0, "weight": 1.0, "input": task,
                        "ref_seconds": 0.001, "ref_lo": 0.0009, "ref_hi": 0.0011}]}


def context(con, sent):
    return JobContext(read=con.cursor, write=lambda fn: fn(con),
                      send=lambda node, kind, body: sent.append((node, kind, body)) or True, exporter=Exporter())


def test_hello_from_a_new_node_gets_every_kit_it_has_no_result_for(tmp_path):
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    migrate(con)
    create_views(con)
    register_kit(con, kit_row(manifest("k1")))
    register_kit(con, kit_row(manifest("k2")))
    sent = []
    ctx = context(con, sent)
    ProbeJob().on_hellos(ctx, [("n1", HELLO)])
    assert sorted((n, k, b["kit"]) for n, k, b in sent) == [("n1", "run_probe", "k1"), ("n1", "run_probe", "k2")]
    assert sent[0][2]["manifest"]["phases"] == manifest()["phases"]
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                "probe_seconds, phases) VALUES ('n1', 'b', 1, ?, 'mw', 'k1', 12.0, 11.0, 13.0, 1.2, 0.5, NULL)",
                [time.time()])
    sent.clear()
    ProbeJob().on_hellos(ctx, [("n1", HELLO)])
    assert [b["kit"] for _, _, b in sent] == ["k2"]
    ProbeJob().run(ctx)
    text = ctx.exporter.exposition().decode()
    assert 'causewatch_predicted_task_seconds{app="mw",node="n1"} 1.2' in text   # per task: 10 tasks a run
    assert 'causewatch_predicted_run_task_seconds{app="mw",node="n1"} 12.0' in text


def test_a_node_whose_probe_failed_is_asked_again_at_its_next_hello_not_on_schedule(tmp_path):
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    migrate(con)
    create_views(con)
    register_kit(con, kit_row(manifest("k1")))
    con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, error) "
                "VALUES ('n1', 'b', 1, ?, 'mw', 'k1', 'No module named ''solver''')", [time.time()])
    con.execute("INSERT INTO nodes (node, first_seen, last_seen) VALUES ('n1', 1, 2)")
    sent = []
    job, ctx = ProbeJob(), context(con, sent)
    job.run(ctx)
    assert sent == []                         # the schedule waits reprobe_after, as for any result
    assert "causewatch_predicted_task_seconds{" not in ctx.exporter.exposition().decode()
    job.on_hellos(ctx, [("n1", HELLO)])       # the agent restarted: mended, maybe
    assert [(n, b["kit"]) for n, _, b in sent] == [("n1", "k1")]


def test_new_agent_is_probed_and_ranked(tmp_path):
    db = tmp_path / "cw.duckdb"
    daemon = probe_daemon(db, manifest())
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
        n = nodes[0]
        assert n["run_lo"] <= n["run_task_seconds"] <= n["run_hi"] and n["tasks_per_run"] == 10
        assert n["task_seconds"] * 10 == pytest.approx(n["run_task_seconds"]) and \
            n["task_lo"] * 10 == pytest.approx(n["run_lo"])
        assert 0 <= n["age_seconds"] < 60 and n["quality"].startswith("quality not recorded")
    finally:
        sender.close()
        daemon.stop()


def test_the_agents_hello_carries_the_machines_boot_id(tmp_path):
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert hello_body({}, None, AgentConfig())["extra"]["boot_id"] == f.read().strip() != ""
    assert hello_body({}, None, AgentConfig(), proc=str(tmp_path))["extra"]["boot_id"] == ""   # not Linux


RESULT = {"app": "mw", "kit": "k1", "predicted_seconds": 12.0, "lo": 11.0, "hi": 13.0, "ratio": 1.2,
          "probe_seconds": 0.5}


def facts(boot_id="boot-1", cores=2):
    return dict(HELLO, cpu_model="cpu X", cores=cores, memory_bytes=2**33, extra={"boot_id": boot_id})


def registered_store(tmp_path):
    db = tmp_path / "cw.duckdb"
    with duckdb.connect(str(db)) as con:
        migrate(con)
        create_views(con)
        register_kit(con, kit_row(manifest()))
    return db


def test_a_hello_under_new_facts_is_probed_again_an_unchanged_one_is_not(tmp_path):
    daemon = Daemon(DaemonConfig(db=str(registered_store(tmp_path)), bind="tcp://127.0.0.1:0", http="127.0.0.1:0"),
                    jobs=[ProbeJob()]).start()
    runs = []

    def agent_run(hello):
        """An agent (re)start on node n1: its own sender, boot and spool; returns its commands."""
        (tmp_path / str(len(runs))).mkdir()
        commands: queue.Queue = queue.Queue()
        sender = Sender(agent_config(tmp_path / str(len(runs)), daemon.endpoint, node="n1"),
                        on_command=commands.put).start()
        runs.append(sender)
        sender.send("hello", hello)
        return sender, commands

    def probed(sender, commands, boot_id):
        assert commands.get(timeout=30).type == "run_probe"
        sender.send("probe_result", RESULT)
        assert sender.flush(30)

        def recorded():
            with daemon.store.cursor() as cur:
                return (readers.probes.newest_probes(cur, ["n1"])[("n1", "mw", "k1")]["facts"] or {}).get("boot_id")
        assert wait_for(lambda: recorded() == boot_id)

    try:
        probed(*agent_run(facts()), "boot-1")
        _, same = agent_run(facts())                   # the agent restarted on the same machine
        rebooted = agent_run(facts("boot-2"))
        probed(*rebooted, "boot-2")
        _, resized = agent_run(facts("boot-2", cores=4))
        assert resized.get(timeout=30).type == "run_probe"
        # hellos are handled in order: had the unchanged one been probed, its run_probe went out already
        time.sleep(0.5)
        assert same.empty() and rebooted[1].empty() and resized.empty()
    finally:
        for sender in runs:
            sender.close()
        daemon.stop()


def test_the_schedule_reprobes_old_results_and_reaches_kits_registered_later(tmp_path):
    db = registered_store(tmp_path)
    now = time.time()
    with duckdb.connect(str(db)) as con:
        for node, ts in (("n-old", now - 2 * 86400), ("n-fresh", now - 60)):
            con.execute("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, "
                        "ratio, probe_seconds) VALUES (?, 'b', 1, ?, 'mw', 'k1', 12, 11, 13, 1.2, 0.5)",
                        [node, ts])
        for node in ("n-old", "n-fresh", "n-new"):      # n-new said hello before the kit was registered
            con.execute("INSERT INTO nodes (node, hostname, agent_version, boot) VALUES (?, 'h', 't', 'b')", [node])
    daemon = Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http=""),
                    jobs=[ProbeJob(reprobe_after=86400, interval=0.1)]).start()
    senders, commands = [], {}
    try:
        for node in ("n-fresh", "n-new", "n-old"):     # connected (a heartbeat), no hello
            commands[node] = queue.Queue()
            senders.append(Sender(agent_config(tmp_path, daemon.endpoint, node=node),
                                  on_command=commands[node].put).start())
            senders[-1].send("heartbeat", {})
        assert commands["n-old"].get(timeout=30).type == "run_probe"
        assert commands["n-new"].get(timeout=30).type == "run_probe"
        time.sleep(0.5)                                # 5 more checks: asked once, the fresh result kept
        assert all(q.empty() for q in commands.values())
    finally:
        for sender in senders:
            sender.close()
        daemon.stop()


def test_each_hello_of_one_batch_is_judged_by_its_own_facts(tmp_path):
    """An agent restarted on the same machine and one on a rebooted machine, their hellos stored in one
    commit before either is handled: only the rebooted one is probed again (judged by the node's row,
    both were, and the rebooted agent got two run_probes). In one burst of hellos a node is judged
    once, by its last."""
    store = Store(str(tmp_path / "s.duckdb"))
    register_kit(store.con, kit_row(manifest()))
    frame = lambda kind, boot, seq, body: wire.decode(wire.encode(kind, "n1", boot, seq, body))  # noqa: E731
    store.commit_frames([frame("hello", "a", 1, facts("boot-1"))])
    store.commit_frames([frame("probe_result", "a", 2, RESULT)])
    store.commit_frames([frame("hello", "b", 1, facts("boot-1")), frame("hello", "c", 1, facts("boot-2"))])
    row = store.con.execute(f"SELECT {NODE_FACTS_SQL} FROM nodes n").fetchone()[0]
    assert json.loads(row) == hello_facts(facts("boot-2"))   # the row's facts and the hello's agree
    sent = []
    ctx = context(store.con, sent)
    ProbeJob().on_hellos(ctx, [("n1", facts("boot-1"))])
    assert sent == []
    ProbeJob().on_hellos(ctx, [("n1", facts("boot-2"))])
    assert [(node, kind) for node, kind, _ in sent] == [("n1", "run_probe")]
    sent.clear()   # one burst, as the scheduler hands it over: a node's last hello speaks for it, once
    ProbeJob().on_hellos(ctx, [("n2", HELLO), ("n1", facts("boot-2")), ("n3", HELLO), ("n1", facts("boot-1"))])
    assert sorted(node for node, _, _ in sent) == ["n2", "n3"]
    sent.clear()
    ProbeJob().on_hellos(ctx, [("n1", facts("boot-1")), ("n2", HELLO), ("n1", facts("boot-2"))])
    assert sorted(node for node, _, _ in sent) == ["n1", "n2"]
    store.close()

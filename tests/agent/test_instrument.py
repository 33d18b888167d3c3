"""The task/region API: measured records through a real agent relay on an ipc socket, or straight to a
real daemon when no agent listens."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest
from support import agent_config, lost_cpu_seconds, query, wait_for

from causewatch.agent import instrument as api
from causewatch.agent.runner import Agent


class Recorder:
    """The agent's sender seen from the relay: keeps what it was given."""

    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def send(self, kind, body):
        self.sent.append((kind, body))
        return len(self.sent)


def spin_a(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        sum(i * i for i in range(200))


def spin_b(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        sorted(str(i) for i in range(200))


@pytest.fixture
def relay(tmp_path):
    cfg = agent_config(tmp_path, "tcp://127.0.0.1:1", ipc=f"ipc://{tmp_path}/agent.sock")
    agent = Agent(cfg, Recorder())
    agent.start()
    assert wait_for(lambda: api.listening(cfg.ipc))
    api.configure(app="solver", ipc=cfg.ipc, spool=cfg.spool, daemon=cfg.daemon)
    yield agent
    api.flush()
    agent._stop.set()
    agent._relay.join(5)


def test_task_and_region_records_carry_time_counters_and_python_vectors(relay):
    lost = lost_cpu_seconds()
    with api.task(params={"n": 3, "mode": "fast"}) as t:
        spin_a(0.15)
        with api.region("sorting"):
            spin_b(0.15)
    lost = lost_cpu_seconds() - lost
    assert t.app == "solver"
    assert wait_for(lambda: relay.relayed == 2)
    kinds = [k for k, _ in relay.sender.sent]
    assert kinds.count("task") == kinds.count("region") == 1 and kinds.count("bbv") == 2
    region = next(b for k, b in relay.sender.sent if k == "region")
    task = next(b for k, b in relay.sender.sent if k == "task")
    assert task["params"] == {"n": 3, "mode": "fast"} and region["region"] == "sorting"
    assert task["cpu_seconds"] >= 0.3 and region["cpu_seconds"] >= 0.15
    assert task["duration"] >= task["cpu_seconds"] * 0.9
    # the thread's perf task-clock agrees with the thread's CPU time, irq and steal time aside
    cpu, clock = task["cpu_seconds"], task["counters"]["task_clock_seconds"]
    assert 0.9 * cpu <= clock <= 1.1 * cpu + lost, (clock, cpu, lost)
    vec = dict(zip(task["bbv"]["keys"], task["bbv"]["counts"]))
    assert any(k.endswith(":spin_a") or "spin_a" in k for k in vec)
    assert any("spin_b" in k for k in vec)                      # the region's code is in the task too
    assert all("spin_a" not in k for k in region["bbv"]["keys"])
    python_bbv = [b for k, b in relay.sender.sent if k == "bbv"]
    assert {b["kind"] for b in python_bbv} == {"python"} and python_bbv[0]["target"] == "app:solver"


def test_competitors_on_the_same_cpu_show_as_cpu_wait(relay):
    """A thread pinned to one CPU spins in a task alone, then while two busy processes are pinned to the
    same CPU: its fair share is a third at most, so it waits on the run queue at least as long as it
    runs, and longer than alone (other work on the machine adds waiting to both)."""
    cpu = min(os.sched_getaffinity(0))
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"

    def tasks():
        os.sched_setaffinity(0, {cpu})   # this thread only
        with api.task(params={"case": "alone"}):
            spin_a(0.2)
        hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
        try:
            assert wait_for(lambda: all(psutil.Process(h.pid).cpu_times().user > 0.05 for h in hogs))
            with api.task(params={"case": "contended"}):
                spin_a(0.2)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    worker = threading.Thread(target=tasks)
    worker.start()
    worker.join(60)
    assert wait_for(lambda: relay.relayed == 2)
    alone, contended = (b["counters"] for k, b in relay.sender.sent if k == "task")
    assert contended["cpu_wait_seconds"] >= contended["task_clock_seconds"] >= 0.15
    assert contended["cpu_wait_seconds"] > alone["cpu_wait_seconds"] >= 0


def test_decorators_measure_each_call_and_exceptions_still_send(relay):
    @api.region("step")
    def step(x):
        if x < 0:
            raise ValueError("negative")
        return x * 2

    @api.task(params={"size": 1})
    def work():
        return step(2)

    assert work() == 4 and work() == 4
    with pytest.raises(ValueError):
        step(-1)
    assert wait_for(lambda: relay.relayed == 5)
    regions = [b for k, b in relay.sender.sent if k == "region"]
    tasks = [b for k, b in relay.sender.sent if k == "task"]
    assert len(regions) == 3 and len(tasks) == 2
    assert len({t["task_id"] for t in tasks}) == 2
    assert regions[-1]["extra"]["exception"] == "ValueError"


def test_nested_regions_name_their_parent_on_the_same_thread(relay):
    with api.region("solve"):
        with api.region("factor"):
            with api.region("pivot"):
                pass
        with api.region("substitute"):
            pass
    with api.region("report"):
        pass
    assert wait_for(lambda: relay.relayed == 5)
    parents = {b["region"]: b["extra"].get("parent") for k, b in relay.sender.sent if k == "region"}
    assert parents == {"pivot": "factor", "factor": "solve", "substitute": "solve", "solve": None, "report": None}


def test_the_relay_refuses_records_that_break_the_wire(relay):
    import msgpack
    assert not relay.relay(b"\xc1 not msgpack")
    assert not relay.relay(msgpack.packb({"type": "samples", "body": {}}))
    assert not relay.relay(msgpack.packb({"type": "task", "body": {"app": "a", "task_id": "1", "start": 0.0,
                                                                   "duration": float("nan")}}))
    assert relay.refused == 3 and [k for k, _ in relay.sender.sent] == ["hello"]


def test_without_an_agent_records_go_straight_to_the_daemon(daemon, tmp_path):
    api.configure(app="direct", ipc=f"ipc://{tmp_path}/nobody.sock", daemon=daemon.endpoint,
                  spool=str(tmp_path / "spool"), node="app-node")
    with api.task(params={"k": 1}, task_id="t-1"):
        spin_a(0.02)
    with api.region("r"):
        spin_b(0.02)
    assert api.flush(30)
    daemon.stop()
    db = daemon.cfg.db
    assert query(db, "SELECT app, task_id FROM tasks WHERE node='app-node'") == [("direct", "t-1")]
    assert query(db, "SELECT app, region, calls FROM regions WHERE node='app-node'") == [("direct", "r", 1)]

"""`causewatch agent` as a real process against a real daemon process and DuckDB file: task and
region records relayed from an instrumented program, unavailable counters reported while the rest
streams, the node collectors as configured listed in hello, and a SIGTERM that leaves every unacked
frame in the spool."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from support import query, wait_for

from causewatch.agent.sender import Sender
from causewatch.agent.spool import Spool
from causewatch.cli import main
from causewatch.commands.agent import UNDELIVERED
from causewatch.config import NODE_COLLECTOR_INTERVALS, AgentConfig

pytestmark = pytest.mark.service   # an agent and a daemon as processes

HARDWARE = ("cycles", "instructions", "cache_references", "cache_misses", "branch_instructions",
            "branch_misses", "l1d_read_misses", "llc_read_misses")
APP = """
import time
from causewatch.agent.instrument import region, task

def work(n):
    t = time.thread_time()
    while time.thread_time() - t < 0.05 * n:
        sum(i * i for i in range(300))

for n in (1, 2, 3):
    with task("e2e-app", params={"n": n}, task_id=f"t{n}"):
        with region("inner"):
            work(n)
"""


def _config(tmp_path, endpoint: str, more: str = "") -> str:
    path = tmp_path / "agent.toml"
    path.write_text(f'[agent]\ndaemon = "{endpoint}"\nnode = "e2e"\nspool = "{tmp_path}/spool"\n'
                    f'ipc = "ipc://{tmp_path}/agent.sock"\n{more}')
    return str(path)


def _spooled(folder) -> int:
    """Frames in a spool that an agent is still writing (SQLite WAL lets a reader in)."""
    import sqlite3
    path = folder / "spool.sqlite"
    if not path.exists():
        return 0
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        try:
            return con.execute("SELECT count(*) FROM frames").fetchone()[0]
        except sqlite3.OperationalError:   # table not created yet
            return 0


def _reap(p: subprocess.Popen) -> None:
    """A hung agent must not outlive its test."""
    if p.poll() is None:
        p.kill()
        p.wait()


def _agent(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "causewatch.cli", "agent", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_task_and_region_records_travel_through_agent_and_daemon_into_duckdb(daemon_process, tmp_path, capsys):
    d = daemon_process()
    cfg = _config(tmp_path, d.endpoint, "[agent.collector_intervals]\nnetstat = 0\nsoftnet = 1\n")
    env = dict(os.environ, CAUSEWATCH_CONFIG=cfg)
    (tmp_path / "app.py").write_text(APP)
    agent = _agent("--config", cfg, "--", sys.executable, str(tmp_path / "app.py"), env=env)
    try:
        out, err = agent.communicate(timeout=90)
    finally:
        _reap(agent)
    assert agent.returncode == 0, err
    d.stop()
    db = d.db
    tasks = query(db, "SELECT task_id, app, params, duration, cpu_seconds, counters, bbv FROM tasks "
                      "WHERE node='e2e' ORDER BY task_id")
    assert [(t[0], t[1], json.loads(t[2])) for t in tasks] == [(f"t{n}", "e2e-app", {"n": n}) for n in (1, 2, 3)]
    cpu = [t[4] for t in tasks]
    assert cpu == sorted(cpu) and cpu[0] >= 0.045
    assert all(json.loads(t[5])["task_clock_seconds"] > 0 and "work" in str(json.loads(t[6])["keys"])
               for t in tasks)
    assert query(db, "SELECT count(*), min(calls) FROM regions WHERE node='e2e' AND region='inner'") == [(3, 1)]
    # the agent relayed them: the records carry the agent's boot, not a direct sender's
    boots = query(db, "SELECT DISTINCT boot FROM ingest_log WHERE node='e2e' AND type IN ('task', 'region')")
    hello_boot = query(db, "SELECT boot FROM ingest_log WHERE node='e2e' AND type='hello'")
    assert boots == hello_boot
    # an event that cannot be opened is reported in hello, and everything else still streamed
    counters = json.loads(query(db, "SELECT counters FROM nodes WHERE node='e2e'")[0][0])
    assert counters["task_clock_seconds"] == "ok" and counters["bbv"] == "ok"
    assert all(counters[h] == "ok" or counters[h].startswith("E") for h in HARDWARE)
    target_metrics = {r[0] for r in query(db, "SELECT DISTINCT metric FROM samples WHERE scope LIKE 'cmd:%'")}
    assert {"task_clock_seconds", "page_faults", "process_resident_memory_bytes"} <= target_metrics
    assert not target_metrics & {h for h in HARDWARE if counters[h] != "ok"}
    memory = "SELECT count(*) FROM samples WHERE scope='node' AND metric='node_memory_MemTotal_bytes'"
    assert query(db, memory)[0][0] >= 1
    # hello lists the node collectors as configured, and `causewatch nodes` shows them
    assert not query(db, "SELECT metric FROM samples WHERE metric LIKE 'node_netstat_%' LIMIT 1")
    assert main(["nodes", "--db", str(db), "--json"]) == 0
    collectors = json.loads(capsys.readouterr().out)[0]["collectors"]
    assert collectors["netstat"] == {"interval": 0.0, "state": "off (collector_intervals.netstat = 0)"}
    assert collectors["softnet"] == {"interval": 1.0, "state": "ok"} and collectors["meminfo"]["state"] == "ok"
    assert len(collectors) == len(NODE_COLLECTOR_INTERVALS)
    kinds = {r[0] for r in query(db, "SELECT DISTINCT kind FROM bbv WHERE node='e2e'")}
    assert kinds == {"native", "python"}
    seqs = [r[0] for r in query(db, "SELECT seq FROM ingest_log WHERE boot=? ORDER BY seq", [hello_boot[0][0]])]
    assert seqs == list(range(1, len(seqs) + 1))


def test_sigterm_keeps_every_unacked_frame_in_the_spool(daemon_process, tmp_path):
    from support import free_port
    endpoint = f"tcp://127.0.0.1:{free_port()}"                 # no daemon yet: nothing gets acked
    cfg = _config(tmp_path, endpoint)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    agent = _agent("--config", cfg, "--flush-timeout", "1", "--pid", str(sleeper.pid))
    try:
        spool = tmp_path / "spool"
        assert wait_for(lambda: _spooled(spool) >= 4, timeout=60)     # hello and a few samples frames
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    finally:
        _reap(agent)
        sleeper.kill()
        sleeper.wait()
    assert agent.returncode == UNDELIVERED and f"spool {spool} for the next run" in err, err
    s = Spool(spool, 256 * 1024 * 1024)
    pending = s.pending()
    s.close()
    boots = {b for b, _, _ in pending}
    assert len(boots) == 1
    seqs = sorted(q for _, q, _ in pending)
    assert seqs == list(range(1, len(seqs) + 1))               # nothing missing, hello first
    # a later run delivers them all, each stored once
    d = daemon_process()
    sender = Sender(AgentConfig(daemon=d.endpoint, node="e2e", spool=str(spool))).start()
    assert sender.flush(30)
    sender.close()
    d.stop()
    stored = query(d.db, "SELECT seq, type FROM ingest_log WHERE boot=? ORDER BY seq", [boots.pop()])
    assert [q for q, _ in stored] == seqs and stored[0][1] == "hello"
    assert {t for _, t in stored} >= {"hello", "samples"} and len(stored) >= 5   # + the flush at SIGTERM


PAUSING_APP = """
import os, sys, time
from causewatch.agent.instrument import task

folder = sys.argv[1]
def tasks(first, count):
    for i in range(first, first + count):
        with task("drain-app", params={"i": i}, task_id=f"t{i}"):
            pass
tasks(0, 20)
open(os.path.join(folder, "paused"), "w").close()      # the test stops the daemon now
while not os.path.exists(os.path.join(folder, "go")):
    time.sleep(0.05)
tasks(20, 30)
"""


def test_a_stop_beside_a_stalled_daemon_keeps_the_unacked_frames_and_the_next_start_stores_each_once(
        daemon_process, tmp_path):
    """The daemon stops answering (SIGSTOP) while an agent's launched program sends its last tasks; the
    agent waits stop_drain_seconds for the acks, says how many frames it left and where, and exits 3. The
    daemon resumes and may store what it had taken without acking it; the next start resends the spool,
    and every task is stored once."""
    d = daemon_process()
    cfg = _config(tmp_path, d.endpoint, "stop_drain_seconds = 1\n")
    (tmp_path / "app.py").write_text(PAUSING_APP)
    agent = _agent("--config", cfg, "--", sys.executable, str(tmp_path / "app.py"), str(tmp_path),
                   env=dict(os.environ, CAUSEWATCH_CONFIG=cfg))
    try:
        assert wait_for(lambda: (tmp_path / "paused").exists() or agent.poll() is not None, timeout=60)
        d.proc.send_signal(signal.SIGSTOP)
        (tmp_path / "go").touch()
        _, err = agent.communicate(timeout=60)
    finally:
        d.proc.send_signal(signal.SIGCONT)
        _reap(agent)
    spool = tmp_path / "spool"
    left = _spooled(spool)
    assert agent.returncode == UNDELIVERED and left > 0, err
    assert f"{left} frames not acked within 1 s; they stay in the spool {spool} for the next run" in err, err
    again = _agent("-v", "--config", cfg, "--", sys.executable, "-c", "pass")
    try:
        _, err = again.communicate(timeout=60)
    finally:
        _reap(again)
    assert again.returncode == 0 and f"spool holds {left} unacked frames from an earlier run" in err, err
    assert _spooled(spool) == 0
    d.stop()
    assert query(d.db, "SELECT count(*), count(DISTINCT task_id) FROM tasks WHERE app='drain-app'") == [(50, 50)]
    for boot, count, first, last in query(d.db, "SELECT boot, count(*), min(seq), max(seq) FROM ingest_log "
                                                "GROUP BY boot"):
        assert (first, last) == (1, count), boot   # each boot's frames all stored, none twice

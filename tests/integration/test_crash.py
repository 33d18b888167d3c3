"""Crashes: a SIGKILLed daemon loses no acked frame; a SIGKILLed agent's spool is delivered later."""

import subprocess
import sys
from pathlib import Path

import duckdb
from support import agent_config, free_port, query, samples, wait_for

from causewatch.agent.sender import Sender

CHILD = str(Path(__file__).with_name("sender_child.py"))


def test_daemon_sigkill_mid_stream_loses_and_doubles_nothing(daemon_process, tmp_path):
    d = daemon_process()
    s = Sender(agent_config(tmp_path, d.endpoint, window=16), resend_after=3).start()
    n = 600
    for i in range(n):
        s.send("samples", samples(i))
    assert wait_for(lambda: s.unacked < n - 100, timeout=60)
    d.kill()
    acked = set(range(1, n + 1)) - {seq for _, seq in s.unacked_keys()}
    assert 0 < len(acked) < n
    with duckdb.connect(str(d.db)) as con:  # the killed daemon's file, its WAL replayed
        stored = {r[0] for r in con.execute("SELECT seq FROM ingest_log").fetchall()}
    assert acked <= stored
    d.start()
    assert s.flush(120)
    s.close()
    d.stop()
    seqs = [r[0] for r in query(d.db, "SELECT seq FROM ingest_log ORDER BY seq")]
    assert seqs == list(range(1, n + 1))
    assert query(d.db, "SELECT count(*), count(DISTINCT ts) FROM samples WHERE metric='cpu'")[0] == (5 * n, 5 * n)


def test_killed_agent_delivers_its_spool_after_restart(daemon_process, tmp_path):
    port, spool = free_port(), str(tmp_path / "spool")
    endpoint = f"tcp://127.0.0.1:{port}"
    first = subprocess.Popen([sys.executable, CHILD, endpoint, spool, "n1", "50", "hang"],
                             stdout=subprocess.PIPE, text=True)
    _, boot, unacked = first.stdout.readline().split()
    assert unacked == "50"  # nothing listens yet: all 50 wait in the spool
    first.kill()
    first.wait()
    d = daemon_process(port=port)
    second = subprocess.run([sys.executable, CHILD, endpoint, spool, "n1", "5", "flush"],
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    d.stop()
    rows = query(d.db, "SELECT boot, count(*), min(seq), max(seq) FROM ingest_log GROUP BY boot ORDER BY count(*) DESC")
    assert rows[0] == (boot, 50, 1, 50) and rows[1][1:] == (5, 1, 5)
    assert query(d.db, "SELECT count(*) FROM tasks")[0][0] == 55

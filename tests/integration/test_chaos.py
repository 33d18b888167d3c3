"""Seeded chaos: sender processes at full speed, the daemon SIGKILLed and restarted on the same file and
port again and again, one sender SIGKILLed and restarted on its spool; then an audit per (node, boot, seq)."""

import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from support import DaemonProcess, free_port, query

HERE = Path(__file__).parent
SEED, KILLS, SENDERS, FRAMES = 12, 10, 3, 1500


class QuickDaemon(DaemonProcess):
    """The daemon without analysis jobs, started from a standby process that has done its imports while
    the previous daemon ran: a restart takes a fraction of a second, not the seconds of imports."""

    standby: subprocess.Popen | None = None

    def _spawn(self) -> subprocess.Popen:
        log = open(self.db.with_suffix(f".{time.monotonic_ns()}.log"), "w")
        return subprocess.Popen([sys.executable, str(HERE / "daemon_child.py"), str(self.db), self.endpoint, ""],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)

    def start(self) -> "QuickDaemon":
        self.proc, self.standby = self.standby or self._spawn(), None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line.startswith("causewatch daemon:"), line
        self.standby = self._spawn()
        return self

    def stop(self) -> None:
        super().stop()
        if self.standby:
            self.standby.kill()
            self.standby.wait()


def launch(endpoint, spool, node, n):
    p = subprocess.Popen([sys.executable, str(HERE / "chaos_sender.py"), endpoint, str(spool), node, str(n)],
                         stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def test_daemon_and_sender_kills_lose_double_and_invent_nothing(tmp_path):
    rng = random.Random(SEED)
    d = QuickDaemon(tmp_path / "chaos.duckdb", port=free_port()).start()
    spools = {f"n{k}": tmp_path / f"spool-{k}" for k in range(SENDERS)}
    procs, boots = {}, {}   # node -> process; (node, boot) -> frames that boot was asked to send
    for node, spool in spools.items():
        procs[node], boot = launch(d.endpoint, spool, node, FRAMES)
        boots[(node, boot)] = FRAMES
    killed_boot = None
    for k in range(KILLS):
        time.sleep(rng.uniform(0.2, 0.6))
        d.kill()
        if k == KILLS // 2:   # a sender dies too, mid-stream, and comes back on its spool
            procs["n0"].kill()
            procs["n0"].wait()
            killed_boot = next(b for (n, b) in boots if n == "n0")
            procs["n0"], boot = launch(d.endpoint, spools["n0"], "n0", 500)
            boots[("n0", boot)] = 500
        time.sleep(rng.uniform(0.0, 0.3))
        d.start()
    for node, p in procs.items():
        assert p.wait(180) == 0, f"sender {node} did not get every frame acked"
    d.stop()
    rows = query(d.db, "SELECT l.node, l.boot, l.seq, t.task_id, t.duration, count(*) OVER (PARTITION BY "
                       "l.node, l.boot, l.seq) FROM ingest_log l LEFT JOIN tasks t USING (node, boot, seq)")
    assert {r[5] for r in rows} == {1}, "a frame is stored twice"
    seen: dict = {}
    for node, boot, seq, task_id, duration, _ in rows:
        assert (node, boot) in boots, f"stored a frame no sender sent: {node}/{boot}/{seq}"
        assert task_id == str(seq) and abs(duration - (seq / 1000 + len(node))) < 1e-9, (node, boot, seq)
        seen.setdefault((node, boot), set()).add(seq)
    for (node, boot), n in boots.items():
        got = seen.get((node, boot), set())
        if boot == killed_boot:   # it spooled 1..K before it died: all of those, nothing after
            assert got == set(range(1, max(got, default=0) + 1)) and len(got) <= n, "a spooled frame was lost"
        else:
            assert got == set(range(1, n + 1)), f"{node}/{boot}: {n - len(got)} frames lost"
    for spool in spools.values():
        with sqlite3.connect(spool / "spool.sqlite") as con:
            assert con.execute("SELECT count(*) FROM frames").fetchone()[0] == 0, f"{spool} not drained"

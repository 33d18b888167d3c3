"""Seeded chaos: sender processes at full speed, the daemon SIGKILLed and restarted on the same file and
port again and again, one sender SIGKILLed and restarted on its spool; then an audit per (node, boot, seq)."""

import random
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


def run_chaos(folder: Path, seed: int, kills: int, senders: int = SENDERS, frames: int = FRAMES) -> dict:
    """Run one seeded chaos round; return the audit: lost, doubled, invented and wrong frames, spooled left."""
    rng = random.Random(seed)
    d = QuickDaemon(folder / "chaos.duckdb", port=free_port()).start()
    spools = {f"n{k}": folder / f"spool-{k}" for k in range(senders)}
    procs, boots = {}, {}   # node -> process; (node, boot) -> frames that boot was asked to send
    for node, spool in spools.items():
        procs[node], boot = launch(d.endpoint, spool, node, frames)
        boots[(node, boot)] = frames
    killed_boot = None
    try:
        for k in range(kills):
            time.sleep(rng.uniform(0.2, 0.6))
            assert d.proc.poll() is None, f"the daemon died on its own (exit {d.proc.returncode}) before kill {k + 1}"
            d.kill()
            if k == kills // 2:   # a sender dies too, mid-stream, and comes back on its spool
                procs["n0"].kill()
                procs["n0"].wait()
                killed_boot = next(b for (n, b) in boots if n == "n0")
                procs["n0"], boot = launch(d.endpoint, spools["n0"], "n0", frames // 4)
                boots[("n0", boot)] = frames // 4
            time.sleep(rng.uniform(0.0, 0.3))
            d.start()
        unflushed = [node for node, p in procs.items() if p.wait(300) != 0]
    finally:
        d.stop()
    rows = query(d.db, "SELECT l.node, l.boot, l.seq, t.task_id, t.duration, count(*) OVER (PARTITION BY "
                       "l.node, l.boot, l.seq) FROM ingest_log l LEFT JOIN tasks t USING (node, boot, seq)")
    audit = {"stored": len(rows), "doubled": sum(r[5] > 1 for r in rows), "invented": 0, "wrong": 0, "lost": 0,
             "spooled_left": 0, "unflushed_senders": len(unflushed)}
    seen: dict = {}
    for node, boot, seq, task_id, duration, _ in rows:
        audit["invented"] += (node, boot) not in boots
        audit["wrong"] += task_id != str(seq) or abs(duration - (seq / 1000 + len(node))) > 1e-9
        seen.setdefault((node, boot), set()).add(seq)
    for (node, boot), n in boots.items():
        got = seen.get((node, boot), set())
        # the killed boot spooled 1..K before it died: all of those must be stored, nothing after
        expected = set(range(1, (max(got, default=0) if boot == killed_boot else n) + 1))
        audit["lost"] += len(expected - got)
        audit["invented"] += len(got - expected)
    for spool in spools.values():
        with sqlite3.connect(spool / "spool.sqlite") as con:
            audit["spooled_left"] += con.execute("SELECT count(*) FROM frames").fetchone()[0]
    return audit


def test_daemon_and_sender_kills_lose_double_and_invent_nothing(tmp_path):
    audit = run_chaos(tmp_path, SEED, KILLS)
    assert audit["stored"] >= SENDERS * FRAMES
    assert {k: v for k, v in audit.items() if k != "stored"} == {
        "doubled": 0, "invented": 0, "wrong": 0, "lost": 0, "spooled_left": 0, "unflushed_senders": 0}

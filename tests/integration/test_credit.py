"""Credit-based flow control and the adaptive resend timeout, against a real daemon on loopback:
what all agents have in flight is bounded by the daemon's max_in_flight_bytes, and a slow daemon is not
sent frames again that it still has queued."""

import threading
import time

import numpy as np
from support import agent_config, query, wait_for

from causewatch import wire
from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.server import Daemon


def big_samples(i: int) -> dict:
    """About 100 KB: 128 timestamps x 100 metrics."""
    rng = np.random.default_rng(i)
    return wire.samples_body(i * 128 + np.arange(128.0), [f"m{k}" for k in range(100)], rng.random((128, 100)))


class SlowWriter:
    """Keeps the daemon's writer thread busy with `seconds`-long calls (as an analysis write would), so
    frames wait in its queue and acks come late."""

    def __init__(self, daemon: Daemon, seconds: float):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(daemon, seconds), daemon=True)

    def _run(self, daemon, seconds):
        while not self.stop.is_set():
            daemon.ingest.call(lambda con: time.sleep(seconds))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def test_what_all_agents_have_in_flight_is_bounded_by_the_daemon(tmp_path):
    budget = 2**20
    d = Daemon(DaemonConfig(db=str(tmp_path / "c.duckdb"), bind="tcp://127.0.0.1:0", http="",
                            max_in_flight_bytes=budget), jobs=[]).start()
    senders = [Sender(agent_config(tmp_path, d.endpoint, f"n{k}", window=32)).start() for k in range(8)]
    for s in senders:   # every agent known to the daemon before the load: each is granted 1 MiB / 8
        s.send("hello", {"hostname": "h", "agent_version": "0"})
    assert all(s.flush(10) for s in senders)
    assert wait_for(lambda: b"causewatch_credit_share_bytes 131072.0" in d.exporter.exposition()
                    and b"causewatch_agents_connected 8.0" in d.exporter.exposition())
    peak = 0
    gate = threading.Event()
    # the writer waits at the gate while the senders send what they may
    stall = threading.Thread(target=d.ingest.call, args=(lambda con: gate.wait(),), daemon=True)
    stall.start()
    for i in range(10):
        for s in senders:
            s.send("samples", big_samples(i))
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        peak = max(peak, sum(s._in_flight_bytes for s in senders))
        time.sleep(0.01)
    frame = len(wire.encode("samples", "n0", "b", 1, big_samples(0)))
    # without credit each would have its window (32 frames, 3.3 MB) out: 26 MB
    assert 0 < peak <= max(budget, 8 * frame), (peak, frame)
    gate.set()
    assert all(s.flush(60) for s in senders)
    for s in senders:
        s.close()
    d.stop()
    assert query(d.cfg.db, "SELECT count(*), count(DISTINCT (node, seq)) FROM ingest_log WHERE type = 'samples'")[0] \
        == (80, 80)


def test_a_slow_daemon_is_not_sent_its_queued_frames_again(tmp_path):
    """Each commit waits ~0.8 s behind a write: acks take ~1 s, longer than resend_after (0.3 s). The timeout
    grows with the observed latency, so once it is known frames are not resent (a fixed 0.3 s timer resent
    every frame, 37 times for 16). The first frames, sent before any ack, may be: how many depends on the
    machine's load (8 on a quiet one, 15 on a loaded CI run), so only later frames are counted. Among those,
    one ack delayed past the learnt timeout by a load spike resends the window once (4 on a CI run), and the
    doubled timeout keeps it from happening again."""
    d = Daemon(DaemonConfig(db=str(tmp_path / "s.duckdb"), bind="tcp://127.0.0.1:0", http=""), jobs=[]).start()
    s = Sender(agent_config(tmp_path, d.endpoint, "slow", window=4), resend_after=0.3).start()
    with SlowWriter(d, 0.8):
        for batch in (range(8), range(8, 16)):
            learnt = s.counts["frames_resent"]
            for i in batch:
                s.send("samples", big_samples(i))
                time.sleep(0.1)
            assert s.flush(60)
    resent, timeout = s.counts["frames_resent"] - learnt, s.resend_timeout
    s.close()
    d.stop()
    assert query(d.cfg.db, "SELECT count(*), count(DISTINCT seq) FROM ingest_log")[0] == (16, 16)
    assert resent <= s.cfg.window, resent   # of the second 8 frames (a fixed timer resends each, again and again)
    assert timeout > 1.0, timeout

"""Real agents' senders and raw sockets against a real daemon on loopback, stored in a real DuckDB file."""

import math
import time
import urllib.request

import msgpack
import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import agent_config, query, samples

from causewatch import wire
from causewatch.agent.sender import Sender


class RawAgent:
    """A bare DEALER socket: sends whatever bytes it is given and returns the daemon's reply."""

    def __init__(self, endpoint):
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def ask(self, data: bytes, timeout_ms=5000) -> wire.Frame:
        self.sock.send(data)
        assert self.sock.poll(timeout_ms), "daemon did not answer"
        return wire.decode(self.sock.recv(), types=wire.DAEMON_TYPES)

    def close(self):
        self.sock.close()


def test_three_agents_every_frame_stored_once_in_order(daemon, tmp_path):
    n = 120
    senders = [Sender(agent_config(tmp_path, daemon.endpoint, f"node-{k}", window=8)).start() for k in range(3)]
    for i in range(n):
        for s in senders:
            s.send("samples", samples(i))
    assert all(s.flush(60) for s in senders)
    for s in senders:
        s.close()
    daemon.stop()
    db = daemon.cfg.db
    for k in range(3):
        seqs = [r[0] for r in query(db, "SELECT seq FROM ingest_log WHERE node=? ORDER BY rowid", [f"node-{k}"])]
        assert seqs == list(range(1, n + 1))
        # samples is a view (no rowid): the rows of the base table, in the order they were stored
        ts = [r[0] / 1000 for r in query(db, "SELECT h.ts FROM samples_hot h JOIN series s USING (series_id) "
                                             "WHERE s.node=? AND s.metric='cpu' ORDER BY h.rowid", [f"node-{k}"])]
        assert ts == list(map(float, range(5 * n)))
    assert query(db, "SELECT count(*) FROM samples")[0][0] == 3 * n * 5 * 3


def metric(daemon, line_start):
    text = urllib.request.urlopen(f"http://{daemon.http.address}/metrics").read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start))


def env(**kw):
    msg = {"v": 1, "type": "samples", "node": "bad", "boot": "b", "seq": 1, "ts": 1.0, "body": samples(0)}
    msg.update(kw)
    return msgpack.packb(msg, use_bin_type=True)


BAD = [
    (b"\x93\x01garbage", "frame", "decode"),
    (env(seq="one"), "frame.seq", "type"),
    (env(body={**samples(0), "values": np.full(15, math.nan).tobytes()}), "body.values[0][cpu]", "nonfinite"),
    (b"\x80" + b"\x00" * (70 * 1024), "frame", "oversize"),
    (env(type="gossip"), "type", "type"),
    (env(v=9), "v", "version"),
]


def test_malformed_frames_get_nacks_are_counted_and_others_still_served(tmp_path):
    from causewatch.config import DaemonConfig
    from causewatch.daemon.server import Daemon
    d = Daemon(DaemonConfig(db=str(tmp_path / "m.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0",
                            max_frame_bytes=64 * 1024), jobs=[]).start()
    try:
        good = Sender(agent_config(tmp_path, d.endpoint, "good")).start()
        raw = RawAgent(d.endpoint)
        for data, field, code in BAD:
            reply = raw.ask(data)
            assert reply.type == "nack" and reply.body["field"] == field, reply.body
            good.send("samples", samples(1))
        assert raw.ask(env(seq=5)).type == "ack"
        assert raw.ask(env(seq=3)).type == "ack"  # late, not lost
        assert raw.ask(env(seq=5)).type == "ack"  # a resend of a stored frame is acked again, not stored
        assert good.flush(20)
        for code in ("decode", "type", "nonfinite", "oversize", "version"):
            assert metric(d, f'causewatch_frames_refused_total{{reason="{code}"}}') >= 1, code
        raw.close()
        good.close()
    finally:
        d.stop()
    assert query(d.cfg.db, "SELECT node, count(*) FROM ingest_log GROUP BY node ORDER BY node") == [
        ("bad", 2), ("good", len(BAD))]


packable_ints = st.integers(-2**63, 2**64 - 1)
envelopes = st.fixed_dictionaries({}, optional={
    "v": st.one_of(st.just(1), packable_ints, st.text(max_size=3)),
    "type": st.sampled_from(wire.AGENT_TYPES + ("ack", "x")),
    "node": st.text(max_size=10), "boot": st.text(max_size=10),
    "seq": st.one_of(st.integers(-5, 2**64 - 1), st.floats()), "ts": st.floats(),
    "body": st.dictionaries(st.text(max_size=8), st.one_of(st.none(), packable_ints, st.floats(), st.text(),
                                                           st.binary(max_size=32)), max_size=5)})
random_frames = st.one_of(st.binary(max_size=200), envelopes.map(lambda m: msgpack.packb(m, use_bin_type=True)))


def test_random_frames_never_break_the_daemon(daemon, tmp_path):
    raw = RawAgent(daemon.endpoint)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(random_frames)
    def throw(data):
        reply = raw.ask(data)
        assert reply.type in ("ack", "nack")
        if reply.type == "nack":
            assert reply.body["field"] and reply.body["reason"]

    throw()
    good = Sender(agent_config(tmp_path, daemon.endpoint, "after")).start()
    good.send("samples", samples(0))
    assert good.flush(10)
    good.close()
    raw.close()


@pytest.mark.parametrize("kind, body, table", [
    ("task", {"app": "lu", "task_id": "7", "start": 1.0, "duration": 2.5, "params": {"n": 40, "dtype": "int"},
              "counters": {"task-clock": 2.4, "cycles": None}}, "tasks"),
    ("region", {"app": "lu", "region": "solve", "start": 1.0, "duration": 0.5, "calls": 3}, "regions"),
    ("bbv", {"target": "pid:1", "kind": "native", "start": 0.0, "end": 0.1,
             "vector": wire.sparse({"libc:memcpy": 4, "a.out:main": 9})}, "bbv"),
    ("probe_result", {"app": "lu", "kit": "k", "predicted_seconds": 3.0, "lo": 2.8, "hi": 3.2, "ratio": 1.1,
                      "probe_seconds": 0.2}, "probe_results"),
    ("hello", {"hostname": "h1", "agent_version": "0.1.0", "cores": 2, "counters": {"cycles": "ENOENT"}}, "nodes"),
])
def test_each_record_type_lands_in_its_table(daemon, tmp_path, kind, body, table):
    s = Sender(agent_config(tmp_path, daemon.endpoint)).start()
    s.send(kind, body)
    assert s.flush(10)
    s.close()
    daemon.stop()
    assert query(daemon.cfg.db, f"SELECT count(*) FROM {table}")[0][0] >= 1


def test_an_empty_samples_frame_is_stored_and_the_writer_goes_on(daemon):
    """A samples frame of 0 timestamps is legal; /metrics' bookkeeping raised IndexError on it in the writer
    thread, after the commit and before the acks, and the daemon stored nothing more."""
    raw = RawAgent(daemon.endpoint)
    empty = wire.samples_body([], ["cpu"], np.zeros((0, 1)))
    assert raw.ask(wire.encode("samples", "e", "b", 1, empty)).type == "ack"
    assert raw.ask(wire.encode("samples", "e", "b", 2, samples(1))).type == "ack"
    raw.close()
    assert metric(daemon, "causewatch_sample_values_stored_total") == 15


def test_each_commit_is_counted_by_its_frames(daemon):
    """causewatch_commit_frames: a frame sent only after the one before was acked is a commit of one."""
    raw = RawAgent(daemon.endpoint)
    for seq in (1, 2):
        assert raw.ask(wire.encode("samples", "c", "b", seq, samples(1))).type == "ack"
    raw.close()
    assert metric(daemon, "causewatch_commit_frames_count") == 2 == metric(daemon, "causewatch_commit_frames_sum")
    assert metric(daemon, 'causewatch_commit_frames_bucket{le="1.0"}') == 2


def test_several_agents_share_commits_and_one_agent_or_a_call_is_not_held(tmp_path):
    """Group commit (commit_delay 2 s): ten agents' frames, 50 ms apart, are gathered into a few commits (one
    each without it); one agent's frames, each sent after the last was acked, and a job's call are not held."""
    from causewatch.config import DaemonConfig
    from causewatch.daemon.server import Daemon
    d = Daemon(DaemonConfig(db=str(tmp_path / "g.duckdb"), bind="tcp://127.0.0.1:0", http="", commit_delay=2.0),
               jobs=[]).start()
    solo = RawAgent(d.endpoint)
    for seq in (1, 2, 3):
        assert solo.ask(wire.encode("samples", "solo", "b", seq, samples(seq)), timeout_ms=1500).type == "ack"
    agents = [RawAgent(d.endpoint) for _ in range(10)]
    before = d.exporter.commit_frames.collect()[0]
    for k, a in enumerate(agents):
        a.sock.send(wire.encode("samples", f"g{k}", "b", 1, samples(k)))
        time.sleep(0.05)
    assert d.ingest.call(lambda con: con.execute("SELECT 1").fetchone(), timeout=1.5) == (1,)
    assert all(a.sock.poll(5000) and wire.decode(a.sock.recv(), types=wire.DAEMON_TYPES).type == "ack"
               for a in agents)
    commits = _sample(d.exporter.commit_frames.collect()[0], "_count") - _sample(before, "_count")
    for a in [solo, *agents]:
        a.close()
    d.stop()
    assert commits <= 4, commits
    assert query(d.cfg.db, "SELECT count(*), count(DISTINCT node) FROM ingest_log") == [(13, 11)]


def _sample(family, suffix: str) -> float:
    return next(s.value for s in family.samples if s.name.endswith(suffix))


def test_a_queue_of_one_mib_makes_senders_wait_and_loses_nothing(tmp_path):
    """max_queue_bytes at its minimum with ~100 KB frames from 3 senders: the IO thread waits for the writer,
    the senders for their acks, and every frame is stored once."""
    from causewatch.config import DaemonConfig
    from causewatch.daemon.server import Daemon
    d = Daemon(DaemonConfig(db=str(tmp_path / "q.duckdb"), bind="tcp://127.0.0.1:0", http="", max_queue_bytes=2**20),
               jobs=[]).start()
    big = [f"m{j}" for j in range(250)]
    senders = [Sender(agent_config(tmp_path, d.endpoint, f"q{k}", window=16)).start() for k in range(3)]
    try:
        for i in range(40):
            for s in senders:
                s.send("samples", samples(i, n_t=50, names=big))
        assert all(s.flush(60) for s in senders)
    finally:
        for s in senders:
            s.close()
        d.stop()
    assert query(d.cfg.db, "SELECT count(*), count(DISTINCT (node, boot, seq)) FROM ingest_log") == [(120, 120)]
    assert query(d.cfg.db, "SELECT count(*) FROM samples")[0][0] == 120 * 50 * 250

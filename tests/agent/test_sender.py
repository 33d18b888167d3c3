"""The sender against real sockets: credit window, refused frames settled, full spool never silent."""

import dataclasses
import logging
import math

import zmq
from support import agent_config, wait_for

from causewatch import wire
from causewatch.agent.sender import Sender


def task(i, duration=1.0):
    return {"app": "a", "task_id": str(i), "start": 0.0, "duration": duration}


def count(sender, name):
    return sender.counts[name]


def test_no_more_than_window_frames_in_flight(tmp_path):
    router = zmq.Context.instance().socket(zmq.ROUTER)  # a daemon that never acks
    port = router.bind_to_random_port("tcp://127.0.0.1")
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{port}", window=4), resend_after=60).start()
    for i in range(20):
        s.send("task", task(i))
    got = []
    while router.poll(1000):   # no credit granted yet: one frame at a time
        ident, data = router.recv_multipart()
        got.append(wire.decode(data).seq)
    assert got == [1]
    router.send_multipart([ident, wire.encode("credit", "daemon", "d", 1, {"bytes": 2**20})])
    while router.poll(1000):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == [1, 2, 3, 4]
    for seq in (1, 2):
        router.send_multipart([ident, wire.encode("ack", "daemon", "d", seq, {"seq": seq, "boot": s.boot})])
    while router.poll(1000):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == [1, 2, 3, 4, 5, 6] and s.unacked == 18
    s.close()
    router.close(linger=0)


def test_credit_in_bytes_bounds_what_is_in_flight(tmp_path):
    """A grant of 2.5 frames' bytes lets 2 frames be unacked; a larger grant lets the window's worth go;
    the handshake says the agent waits for grants."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{port}", window=8), resend_after=60).start()
    sizes = [len(wire.encode("task", s.cfg.node, s.boot, i + 1, task(i))) for i in range(20)]
    for i in range(20):
        s.send("task", task(i))
    ident, data = router.recv_multipart(copy=False)
    assert data.get(wire.CREDIT_PROPERTY) == "1"
    got = [wire.decode(data.bytes).seq]
    router.send_multipart([ident, wire.encode("credit", "daemon", "d", 1, {"bytes": int(2.5 * sizes[0])})])
    while router.poll(1000):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == [1, 2]
    router.send_multipart([ident, wire.encode("credit", "daemon", "d", 2, {"bytes": 2**20})])
    while router.poll(1000):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == list(range(1, 9))
    s.close()
    router.close(linger=0)


def test_refused_frame_is_settled_not_resent(daemon, tmp_path):
    s = Sender(agent_config(tmp_path, daemon.endpoint), resend_after=1).start()
    s.send("task", task(1, duration=math.inf))
    s.send("task", task(2))
    assert s.flush(10)
    assert count(s, "frames_nacked") == 1 and count(s, "frames_resent") == 0
    s.close()


def test_full_spool_drops_oldest_with_a_log_line_and_a_metric(tmp_path, caplog):
    cfg = agent_config(tmp_path, "tcp://127.0.0.1:9", spool_max_bytes=2000)  # nothing listens there
    s = Sender(cfg).start()
    with caplog.at_level(logging.WARNING, "causewatch.agent.sender"):
        for i in range(40):
            s.send("task", task(i))
    assert count(s, "spool_dropped_frames") > 0
    assert s.unacked + count(s, "spool_dropped_frames") == 40
    assert any("spool full" in r.message for r in caplog.records)
    s.close()


def test_run_probe_commands_reach_the_callback(tmp_path):
    router = zmq.Context.instance().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    seen = []
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{port}"), on_command=seen.append).start()
    s.send("hello", {"hostname": "h", "agent_version": "0"})
    ident = router.recv_multipart()[0]
    router.send_multipart([ident, wire.encode("run_probe", "daemon", "d", 1, {"app": "lu", "kit": "k1"})])
    assert wait_for(lambda: seen)
    assert seen[0].type == "run_probe" and seen[0].body["kit"] == "k1"
    s.close()
    router.close(linger=0)


def grant(router, ident, s):
    """Grant the sender (whose thread the test drives) a megabyte of credit, as a daemon would, and let it send."""
    router.send_multipart([ident, wire.encode("credit", "daemon", "d", 1, {"bytes": 2**20})])
    assert s._sock.poll(5000)
    s._receive()
    s._send_window()


def _handshake(s):
    """Read the sender's monitor until its connection is ready (what its own thread would do)."""
    from zmq.utils.monitor import recv_monitor_message
    while True:
        assert s._monitor.poll(5000), "no handshake"
        event = recv_monitor_message(s._monitor)
        s._on_event(event)
        if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            return


def test_nothing_is_sent_between_disconnect_and_the_next_handshake(tmp_path):
    """Frames written after DISCONNECTED went into the dead connection, so later seqs
    reached the restarted daemon first. The sender thread is not started: the test drives it."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{port}", window=8))
    s._sock = s._socket()
    _handshake(s)
    for i in range(3):
        s.send("task", task(i))
    s._send_window()
    ident, first = router.recv_multipart()
    grant(router, ident, s)
    got = [wire.decode(first).seq] + [wire.decode(router.recv_multipart()[-1]).seq for _ in range(2)]
    s._on_event({"event": zmq.EVENT_DISCONNECTED, "value": 0, "endpoint": b""})
    s.send("task", task(3))
    s._send_window()
    assert not router.poll(300), "a frame was sent after DISCONNECTED, before a new handshake"
    s._on_event({"event": zmq.EVENT_HANDSHAKE_SUCCEEDED, "value": 0, "endpoint": b""})
    s._send_window()
    got.append(wire.decode(router.recv_multipart()[-1]).seq)   # the oldest alone, until the daemon grants
    grant(router, ident, s)
    while router.poll(300):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == [1, 2, 3, 1, 2, 3, 4]   # everything unacked again, oldest first
    s._sock.disable_monitor()
    s._monitor.close(linger=0)
    s._sock.close(linger=0)
    s.spool.close()
    router.close(linger=0)


def test_a_nack_that_blames_no_frame_keeps_it_spooled_and_resends_it(tmp_path):
    """The sender deleted every nacked frame from its spool, even on a store error."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    s = Sender(agent_config(tmp_path, f"tcp://127.0.0.1:{port}"), resend_after=0.5).start()
    s.send("task", task(1))
    ident, data = router.recv_multipart()
    frame = wire.decode(data)
    router.send_multipart([ident, wire.encode("nack", "daemon", "d", 1, {
        "seq": frame.seq, "boot": frame.boot, "field": "frame", "reason": "store error: disk full", "code": "store"})])
    assert router.poll(5000), "the frame was not sent again"
    ident, again = router.recv_multipart()
    assert wire.decode(again).seq == frame.seq and s.unacked == 1 and len(s.spool.pending()) == 1
    router.send_multipart([ident, wire.encode("ack", "daemon", "d", 2, {"seq": frame.seq, "boot": frame.boot})])
    assert s.flush(5) and s.spool.pending() == [] and count(s, "frames_acked") == 1 and count(s, "frames_refused") == 1
    s.close()
    router.close(linger=0)


def test_sender_adopts_the_frames_an_instrumented_program_spooled(daemon, tmp_path):
    """Records spooled by a program that found no agent were never resent."""
    cfg = agent_config(tmp_path, "tcp://127.0.0.1:9")   # nothing listens there
    orphan = Sender(dataclasses.replace(cfg, spool=f"{cfg.spool}/instrument"))
    for i in range(5):
        orphan.send("task", task(i))
    orphan.close()
    s = Sender(agent_config(tmp_path, daemon.endpoint)).start()
    assert s.flush(10) and count(s, "frames_acked") == 5
    s.close()
    again = Sender(agent_config(tmp_path, daemon.endpoint))
    assert again.unacked == 0   # the instrument spool was emptied, not copied
    again.spool.close()

"""The sender against real sockets: credit window, refused frames settled, full spool never silent."""

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
    while router.poll(1000):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == [1, 2, 3, 4]
    ident = f"node-1/{s.boot}".encode()
    for seq in (1, 2):
        router.send_multipart([ident, wire.encode("ack", "daemon", "d", seq, {"seq": seq, "boot": s.boot})])
    while router.poll(1000):
        got.append(wire.decode(router.recv_multipart()[-1]).seq)
    assert got == [1, 2, 3, 4, 5, 6] and s.unacked == 18
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

"""The writer's work queue: bounded in bytes, so a full daemon makes the IO thread (and the agents) wait."""

import threading
import time

from causewatch.daemon.ingest import WorkQueue


def test_put_waits_while_the_bytes_are_full_and_one_frame_always_fits():
    q = WorkQueue(max_bytes=100)
    q.put("big", 500)                      # over the bound, but the queue is empty: it must fit
    q.put("call")                          # calls cost nothing and never wait
    blocked = threading.Thread(target=q.put, args=("next", 60))
    blocked.start()
    time.sleep(0.2)
    assert blocked.is_alive() and q.bytes == 500
    assert q.take(1) == ["big"]            # frees the bytes: the waiting put goes in
    blocked.join(5)
    assert not blocked.is_alive()
    assert (q.take(10), q.bytes) == (["call", "next"], 0)


def test_take_waits_for_work_and_returns_at_most_the_batch():
    q = WorkQueue(max_bytes=10**6)
    got = []
    taker = threading.Thread(target=lambda: got.append(q.take(2)))
    taker.start()
    time.sleep(0.1)
    assert taker.is_alive()
    for i in range(3):
        q.put(i, 10)
    taker.join(5)
    assert got[0] in ([0], [0, 1]) and q.take(5) == [i for i in range(3) if i not in got[0]]


def test_unbound_lets_a_waiting_put_through_once_the_writer_has_stopped():
    q = WorkQueue(max_bytes=100)
    q.put("a", 100)
    waiting = threading.Thread(target=q.put, args=("b", 100))
    waiting.start()
    time.sleep(0.1)
    assert waiting.is_alive()
    q.unbound()
    waiting.join(5)
    assert not waiting.is_alive()


def test_take_stops_at_the_batch_bytes_and_always_takes_one():
    q = WorkQueue(max_bytes=10**6)
    for i, size in enumerate((70, 20, 20, 0, 5)):
        q.put(i, size)
    assert q.take(10, 100) == [0, 1]           # 70 + 20; a third would make 110
    assert q.take(10, 10) == [2]               # the first whatever its size
    assert (q.take(1, 10), q.take(10, 10), q.bytes) == ([3], [4], 0)

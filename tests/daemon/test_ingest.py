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


def test_gather_stops_once_frames_stop_coming_and_waits_while_they_keep_their_gaps():
    """Frames 20 ms apart, then none: the gathering writer commits after 8 mean gaps, not at its bound;
    while frames keep coming at that pace it gathers on (agents on a clock)."""
    q = WorkQueue(max_bytes=10**6)
    for i in range(5):
        q.put(i, 10)
        time.sleep(0.02)
    t0 = time.monotonic()
    q.gather(t0 + 5.0, most=100, most_bytes=10**6)
    assert 0.1 < time.monotonic() - t0 < 1.0
    feeding = threading.Thread(target=lambda: [time.sleep(0.02) or q.put(i, 10) for i in range(40)])
    t0 = time.monotonic()
    feeding.start()
    q.gather(t0 + 0.6, most=100, most_bytes=10**6)
    feeding.join()
    assert time.monotonic() - t0 >= 0.55, "a writer whose frames keep coming stopped gathering"


def test_a_frame_wakes_a_waiting_take_and_a_gather_that_it_fills():
    q = WorkQueue(max_bytes=10**6)
    got = []
    taker = threading.Thread(target=lambda: got.append(q.take(5)))
    taker.start()
    time.sleep(0.05)
    q.put("a", 10)
    taker.join(1)
    assert got == [["a"]]
    gatherer = threading.Thread(target=q.gather, args=(time.monotonic() + 5.0, 2, 10**6))
    gatherer.start()
    q.put("b", 10)
    q.put("c", 10)
    gatherer.join(1)
    assert not gatherer.is_alive()

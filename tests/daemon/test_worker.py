"""Tests of a worker process (daemon/worker.py): a real spawned child at the lowest priority, its
errors raised in the daemon, a death mid-request a clear WorkerError and a fresh child next time, and
pauses while the daemon's writer has a backlog (a real daemon, a real agent's frames)."""

import math
import os
import resource
import subprocess
import sys
import threading
import time

import psutil
import pytest
from priority_work import Overrunning, Spinning, policy_after, spin
from support import agent_config, free_port, samples, wait_for

from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon import worker as worker_module
from causewatch.daemon.calls import Entry
from causewatch.daemon.scheduler import WorkerJobs
from causewatch.daemon.server import Daemon
from causewatch.daemon.worker import LOWEST_PRIORITY, Worker, WorkerError, ask

pytestmark = pytest.mark.service   # worker processes, a daemon's among them


@pytest.fixture
def worker():
    w = Worker()
    yield w
    w.stop()


def test_work_runs_in_a_child_at_the_lowest_priority(worker):
    assert worker(os.getpid) not in (os.getpid(), None)
    assert worker(os.getpriority, os.PRIO_PROCESS, 0) == LOWEST_PRIORITY
    assert worker(os.sched_getscheduler, 0) == os.SCHED_IDLE
    assert os.getpriority(os.PRIO_PROCESS, 0) < LOWEST_PRIORITY   # the daemon itself keeps its priority
    assert worker(math.fsum, [0.1] * 10) == 1.0


def test_a_chosen_niceness_keeps_the_normal_scheduler():
    w = Worker(niceness=5)
    try:
        assert w(os.getpriority, os.PRIO_PROCESS, 0) == 5 and w(os.sched_getscheduler, 0) == os.SCHED_OTHER
    finally:
        w.stop()


def _refused(*args, **kwargs):
    raise PermissionError(1, "Operation not permitted")


CAN_RAISE = os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 10


@pytest.mark.skipif(not CAN_RAISE, reason="raising a priority needs root, CAP_SYS_NICE or RLIMIT_NICE >= 20")
def test_a_starved_request_is_raised_to_a_fair_share_until_it_ends_under_a_hog_on_every_core():
    """At SCHED_IDLE the worker gets no CPU while every core is busy. With a busy process on
    each core, a request that needs 0.3 CPU-s finishes because the worker is raised to nice 10
    (SCHED_OTHER; 10 the default) after starved_after s; afterwards it is back at SCHED_IDLE."""
    w = Worker()
    assert w(os.getpid) and w.raised_seconds == 0.0   # the child started, before the hogs
    w.starved_after = 0.3
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        assert w(spin, 0.3) == (os.SCHED_OTHER, 10)
        assert w.raised_seconds > 0
        # read from here: a request would itself starve behind the hogs, and be raised
        assert os.sched_getscheduler(w.pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, w.pid) == LOWEST_PRIORITY
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        w.stop()


@pytest.mark.slow
@pytest.mark.skipif(not CAN_RAISE, reason="raising a priority needs root, CAP_SYS_NICE or RLIMIT_NICE >= 20")
def test_a_job_run_is_starved_once_it_has_taken_its_own_interval(tmp_path):
    """A job's run that has taken its interval (its next run is due) is raised though the worker's
    starved_after is far off: under a hog on every core it finishes at nice 10, not at SCHED_IDLE."""
    report = tmp_path / "policy"
    w = Worker(setup=(Entry.INSTALL_JOBS, (DaemonConfig(), [Spinning(str(report))])), starved_after=3600.0)
    jobs = WorkerJobs(w)
    assert jobs.schedule() == [("spinning", 0.3)]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        jobs.run("spinning")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        w.stop()
    assert report.read_text() == f"{os.SCHED_OTHER} 10" and w.raised_seconds > 0


@pytest.mark.slow
@pytest.mark.skipif(not CAN_RAISE, reason="raising a priority needs root, CAP_SYS_NICE or RLIMIT_NICE >= 20")
def test_a_run_after_one_that_overran_is_raised_from_its_start(tmp_path):
    """The run after one that overran is late from its start: raised at once, not after its interval."""
    report = tmp_path / "policy"
    w = Worker(setup=(Entry.INSTALL_JOBS, (DaemonConfig(), [Overrunning(str(report))])), starved_after=3600.0)
    jobs = WorkerJobs(w)
    try:
        jobs.schedule()
        jobs.run("overrunning")   # 3.5 s of a 3-s interval, raised at 3 s
        jobs.run("overrunning")   # 0.2 s in, raised
        assert report.read_text() == f"{os.SCHED_OTHER} 10"
        assert (os.sched_getscheduler(w.pid), os.getpriority(os.PRIO_PROCESS, w.pid)) == (os.SCHED_IDLE,
                                                                                           LOWEST_PRIORITY)
    finally:
        w.stop()


def test_a_worker_that_may_not_raise_says_so_once_and_goes_on(caplog, monkeypatch):
    """Without the right to raise (RLIMIT_NICE 0, as a plain user without LimitNICE), the request still
    runs, at SCHED_IDLE, and the log says what the daemon needs, once."""
    w = Worker()
    try:
        w(os.getpid)   # the child started (not raised: a loaded machine may keep even this waiting)
        resource.prlimit(w.pid, resource.RLIMIT_NICE, (0, 0))
        if os.geteuid() == 0:   # root may raise whatever the limit: the kernel's refusal, as a user gets it
            monkeypatch.setattr(worker_module, "_set_priority", _refused)
        w.starved_after = 0.1
        assert w(policy_after, 0.5) == (os.SCHED_IDLE, LOWEST_PRIORITY)
        assert w(policy_after, 0.3) == (os.SCHED_IDLE, LOWEST_PRIORITY)
        assert caplog.text.count("LimitNICE=+10") == 1 and w.raised_seconds == 0.0
    finally:
        w.stop()


def test_an_error_in_the_work_is_raised_in_the_daemon_with_the_childs_traceback(worker):
    with pytest.raises(ValueError, match="math domain error") as info:
        worker(math.sqrt, -1.0)
    assert any("in causewatch-worker" in note for note in info.value.__notes__)
    assert worker(math.sqrt, 4.0) == 2.0   # the same child goes on


def test_a_child_killed_mid_request_is_a_clear_error_and_the_next_request_gets_a_new_child(worker):
    first = worker(os.getpid)
    threading.Timer(0.5, os.kill, (first, 9)).start()
    with pytest.raises(WorkerError, match=r"ended \(exit code -9\) during sleep"):
        worker(time.sleep, 30)
    second = worker(os.getpid)
    assert second != first


def test_an_idle_child_is_retired_and_the_next_request_forks_another(worker):
    first = worker(os.getpid)
    assert not worker.retire(600) and worker.pid == first   # used just now
    assert worker.retire(0) and worker.pid is None
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    assert worker(os.getpid) not in (first, None)


def test_the_workers_are_forked_from_one_server_that_loaded_the_analysis_stack(worker):
    """Their libraries are the fork server's pages, shared (docs/memory.md): a worker has numba and pandas
    before its first request needs them."""
    child = psutil.Process(worker(os.getpid))
    maps = {m.path for m in child.memory_maps()}
    assert any("/llvmlite/" in m for m in maps) and any("/pandas/" in m for m in maps)
    other = Worker(niceness=0)
    try:
        assert psutil.Process(other(os.getpid)).ppid() == child.ppid() != os.getpid()
    finally:
        other.stop()


def test_stop_cuts_a_long_request_short_and_refuses_new_ones():
    w = Worker()
    w(os.getpid)
    threading.Timer(0.5, w.stop).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerError):
        w(time.sleep, 30)
    assert time.monotonic() - t0 < 10
    assert w.pid is None
    with pytest.raises(WorkerError, match="stopping"):
        w(os.getpid)


def work(seconds: float) -> range:
    """Arguments for sum() that keep a process busy about `seconds` (sum and range are builtins, so the
    child needs no import of this module to run them)."""
    t0 = time.process_time()
    sum(range(10**6))
    return range(int(10**6 * seconds / max(time.process_time() - t0, 1e-4)))


def test_the_child_is_paused_while_busy_and_runs_its_share_between_pauses():
    busy = threading.Event()
    w = Worker(busy=busy.is_set, max_pause=0.3, min_run=0.1, niceness=0)
    try:
        w(os.getpid)   # started and ready (a busy daemon would pause its start-up as well)
        busy.set()
        seen = []
        watch = threading.Thread(target=lambda: [seen.append(psutil.Process(w.pid).status()) or time.sleep(0.05)
                                                 for _ in range(12)])
        watch.start()
        t0 = time.monotonic()
        w(sum, work(0.6))
        wall = time.monotonic() - t0
        watch.join()
    finally:
        w.stop()
    # ~0.6 s of CPU at most 0.1 s running per 0.3 s paused: 0.5 s of pauses or more, seen from both sides,
    # even if the child runs twice as fast as `work` measured here (with 0.3 s of work, a CI run paused
    # only once: 0.31 s)
    assert psutil.STATUS_STOPPED in seen
    assert 0.5 <= w.paused_seconds <= wall


def test_an_idle_ingest_never_pauses_the_child():
    w = Worker(busy=lambda: False, max_pause=0.3, min_run=0.1, niceness=0)
    try:
        w(sum, work(0.3))
        assert w.paused_seconds == 0.0
    finally:
        w.stop()


def test_stop_ends_a_paused_child():
    busy = threading.Event()
    w = Worker(busy=busy.is_set, max_pause=60, min_run=0.05, niceness=0)
    w(os.getpid)
    busy.set()
    threading.Timer(0.5, w.stop).start()
    t0 = time.monotonic()
    with pytest.raises(WorkerError):
        w(sum, work(5))
    assert time.monotonic() - t0 < 10 and w.pid is None


OWNER = """
import os, sys
from causewatch.daemon.worker import Worker
busy = []   # not busy while the child starts, busy for good after
w = Worker(busy=lambda: bool(busy), max_pause=600, min_run=0.05, niceness=0)
print(w(os.getpid), flush=True)
busy.append(True)
w(sum, range(10**12))
"""


def test_a_paused_child_dies_with_a_killed_daemon():
    # SIGKILL the worker's owner while the child is stopped: the child must not linger, stopped for good.
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(owner.stdout.readline()))
        assert wait_for(lambda: child.status() == psutil.STATUS_STOPPED, timeout=30)
        owner.kill()
        owner.wait(10)
        assert wait_for(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, timeout=10)
    finally:
        owner.kill()


def test_the_daemon_pauses_its_worker_while_frames_wait_for_the_writer(tmp_path):
    cfg = DaemonConfig(db=str(tmp_path / "d.duckdb"), bind=f"tcp://127.0.0.1:{free_port()}", http="",
                       analysis_nice=0, analysis_pause_max=0.3)
    daemon = Daemon(cfg, jobs=[]).start()
    sender = Sender(agent_config(tmp_path, daemon.endpoint)).start()
    holding, release = threading.Event(), threading.Event()
    try:
        sender.send("samples", samples(0))
        assert sender.flush(10)
        daemon.jobs_worker(sum, work(0.05))
        assert daemon.jobs_worker.paused_seconds == 0.0   # nothing waits for the writer
        # a long transaction holds the writer: the agent's next frames queue up behind it
        holder = threading.Thread(target=daemon.ingest.call, args=(lambda con: holding.set() or release.wait(20),))
        holder.start()
        assert holding.wait(10)
        sender.send("samples", samples(1))
        assert wait_for(lambda: daemon.ingest.backlog_bytes() > 0)
        daemon.jobs_worker(sum, work(0.2))
        paused = daemon.jobs_worker.paused_seconds
        release.set()
        holder.join()
        assert sender.flush(10)   # the frame is stored and acked once the writer is free
        assert paused >= 0.3 and daemon.ingest.backlog_bytes() == 0
    finally:
        release.set()
        sender.close()
        daemon.stop()


def test_the_child_asks_the_daemon_through_its_host_and_each_new_child_is_set_up():
    """ask() reaches the host on the caller's thread, and the host's error is raised in the child (then
    here, with the child's traceback); each new child runs the setup first."""
    asked = []

    def host(kind, *args):
        asked.append((kind, args))
        return sum(args) if kind == "add" else 1 / 0

    w = Worker(niceness=0, host=host, setup=(os.getpid, ()))
    try:
        first = w.start()
        assert first == w.pid != os.getpid()
        assert w(ask, "add", 2, 3) == 5 and asked == [("add", (2, 3))]
        with pytest.raises(ZeroDivisionError) as info:
            w(ask, "divide")
        assert any("in causewatch-worker" in note for note in info.value.__notes__)
        os.kill(first, 9)
        assert wait_for(lambda: w.pid is None)
        assert w(os.getpid) == w.setup_ != first   # the new child was set up before the request
    finally:
        w.stop()


def test_the_fork_server_starts_no_thread_pool_after_the_parallel_kernels_were_cached():
    """numba's OpenMP pool kills a forked child ('fork() called from a process already using GNU OpenMP'):
    the preload's serial kernels must never load the parallel ones' cached code. The checkout's own cache,
    which the daemon reads (a cache of its own would compile every kernel again, ~13 s)."""
    fill = ("import numpy as np; from causewatch.analytics.causal import entropy as e; "
            "e._subspace_sums_symmetric(np.zeros((1, 8)), np.zeros((3, 0)), np.array([1, 0, 0]), 2)")
    subprocess.run([sys.executable, "-c", fill], check=True, timeout=300)
    check = ("import causewatch.daemon.preload; from numba.np.ufunc import parallel; "
             "print(parallel._is_initialized)")
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr[-2000:]

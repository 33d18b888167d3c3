"""The task/region API: measured records through a real agent relay on an ipc socket, or straight to a
real daemon when no agent listens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import psutil
import pytest
from support import ROOT, agent_config, lost_cpu_seconds, query, wait_for

from causewatch.agent import instrument as api
from causewatch.agent.runner import Agent


class Recorder:
    """The agent's sender seen from the relay: keeps what it was given."""

    def __init__(self):
        self.sent: list[tuple[str, dict]] = []

    def send(self, kind, body):
        self.sent.append((kind, body))
        return len(self.sent)


def spin_a(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        sum(i * i for i in range(200))


def spin_b(seconds: float) -> None:
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        sorted(str(i) for i in range(200))


def on(where: str, fn) -> None:
    """Run `fn` on the main thread (sampled by SIGPROF) or on another one (sampled by the timer thread)."""
    if where == "main":
        fn()
        return
    worker = threading.Thread(target=fn)
    worker.start()
    worker.join(60)


def vectors(relay, kind: str) -> list[dict]:
    return [dict(zip(b["bbv"]["keys"], b["bbv"]["counts"])) for k, b in relay.sender.sent if k == kind and "bbv" in b]


@pytest.fixture
def relay(tmp_path):
    cfg = agent_config(tmp_path, "tcp://127.0.0.1:1", ipc=f"ipc://{tmp_path}/agent.sock")
    agent = Agent(cfg, Recorder())
    agent.start()
    assert wait_for(lambda: api.listening(cfg.ipc))
    api.configure(app="solver", ipc=cfg.ipc, spool=cfg.spool, daemon=cfg.daemon)
    yield agent
    api.flush()
    agent._stop.set()
    agent._relay.join(5)


def test_task_and_region_records_carry_time_counters_and_python_vectors(relay):
    lost = lost_cpu_seconds()
    with api.task(params={"n": 3, "mode": "fast"}) as t:
        spin_a(0.15)
        with api.region("sorting"):
            spin_b(0.15)
    lost = lost_cpu_seconds() - lost
    assert t.app == "solver"
    assert wait_for(lambda: relay.relayed == 2)
    kinds = [k for k, _ in relay.sender.sent]
    assert kinds.count("task") == kinds.count("region") == 1 and kinds.count("bbv") == 2
    region = next(b for k, b in relay.sender.sent if k == "region")
    task = next(b for k, b in relay.sender.sent if k == "task")
    assert task["params"] == {"n": 3, "mode": "fast"} and region["region"] == "sorting"
    assert task["cpu_seconds"] >= 0.3 and region["cpu_seconds"] >= 0.15
    assert task["duration"] >= task["cpu_seconds"] * 0.9
    # the thread's perf task-clock agrees with the thread's CPU time, irq and steal time aside
    cpu, clock = task["cpu_seconds"], task["counters"]["task_clock_seconds"]
    assert 0.9 * cpu <= clock <= 1.1 * cpu + lost, (clock, cpu, lost)
    vec = dict(zip(task["bbv"]["keys"], task["bbv"]["counts"]))
    assert any(k.endswith(":spin_a") or "spin_a" in k for k in vec)
    assert any("spin_b" in k for k in vec)                      # the region's code is in the task too
    assert all("spin_a" not in k for k in region["bbv"]["keys"])
    python_bbv = [b for k, b in relay.sender.sent if k == "bbv"]
    assert {b["kind"] for b in python_bbv} == {"python"} and python_bbv[0]["target"] == "app:solver"


def test_competitors_on_the_same_cpu_show_as_cpu_wait(relay):
    """A thread pinned to one CPU spins in a task alone, then while two busy processes are pinned to the
    same CPU: its fair share is a third at most, so it waits on the run queue at least as long as it
    runs, and longer than alone (other work on the machine adds waiting to both)."""
    cpu = min(os.sched_getaffinity(0))
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"

    def tasks():
        os.sched_setaffinity(0, {cpu})   # this thread only
        with api.task(params={"case": "alone"}):
            spin_a(0.2)
        hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
        try:
            assert wait_for(lambda: all(psutil.Process(h.pid).cpu_times().user > 0.05 for h in hogs))
            with api.task(params={"case": "contended"}):
                spin_a(0.2)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    worker = threading.Thread(target=tasks)
    worker.start()
    worker.join(60)
    assert wait_for(lambda: relay.relayed == 2)
    alone, contended = (b["counters"] for k, b in relay.sender.sent if k == "task")
    assert contended["cpu_wait_seconds"] >= contended["task_clock_seconds"] >= 0.15
    assert contended["cpu_wait_seconds"] > alone["cpu_wait_seconds"] >= 0


def test_decorators_measure_each_call_and_exceptions_still_send(relay):
    @api.region("step")
    def step(x):
        if x < 0:
            raise ValueError("negative")
        return x * 2

    @api.task(params={"size": 1})
    def work():
        return step(2)

    assert work() == 4 and work() == 4
    with pytest.raises(ValueError):
        step(-1)
    assert wait_for(lambda: relay.relayed == 5)
    regions = [b for k, b in relay.sender.sent if k == "region"]
    tasks = [b for k, b in relay.sender.sent if k == "task"]
    assert len(regions) == 3 and len(tasks) == 2
    assert len({t["task_id"] for t in tasks}) == 2
    assert regions[-1]["extra"]["exception"] == "ValueError"


def test_nested_regions_name_their_parent_on_the_same_thread(relay):
    with api.region("solve"):
        with api.region("factor"):
            with api.region("pivot"):
                pass
        with api.region("substitute"):
            pass
    with api.region("report"):
        pass
    assert wait_for(lambda: relay.relayed == 5)
    parents = {b["region"]: b["extra"].get("parent") for k, b in relay.sender.sent if k == "region"}
    assert parents == {"pivot": "factor", "factor": "solve", "substitute": "solve", "solve": None, "report": None}


def test_the_relay_refuses_records_that_break_the_wire(relay):
    import msgpack
    assert not relay.relay(b"\xc1 not msgpack")
    assert not relay.relay(msgpack.packb({"type": "samples", "body": {}}))
    assert not relay.relay(msgpack.packb({"type": "task", "body": {"app": "a", "task_id": "1", "start": 0.0,
                                                                   "duration": float("nan")}}))
    assert relay.refused == 3 and [k for k, _ in relay.sender.sent] == ["hello"]


def test_without_an_agent_records_go_straight_to_the_daemon(daemon, tmp_path):
    api.configure(app="direct", ipc=f"ipc://{tmp_path}/nobody.sock", daemon=daemon.endpoint,
                  spool=str(tmp_path / "spool"), node="app-node")
    with api.task(params={"k": 1}, task_id="t-1"):
        spin_a(0.02)
    with api.region("r"):
        spin_b(0.02)
    assert api.flush(30)
    daemon.stop()
    db = daemon.cfg.db
    assert query(db, "SELECT app, task_id FROM tasks WHERE node='app-node'") == [("direct", "t-1")]
    assert query(db, "SELECT app, region, calls FROM regions WHERE node='app-node'") == [("direct", "r", 1)]


@pytest.mark.parametrize("where", ["main", "thread"])
def test_balanced_tasks_and_regions_leave_no_vector_watched(relay, monkeypatch, where):
    """A task and a region opened first in it hold equal vectors until a sample lands after the region.
    Unwatched by equality, the region's exit took the task's vector off instead of its own, which stayed
    behind, sampled and compared at every exit after (29-38 of 200 here; CPU per task grew over a run)."""
    monkeypatch.setattr(api._sampler, "interval", 0.001)

    def pairs():
        for i in range(200):
            with api.task(params={"i": i}):
                with api.region("first"):
                    pass
                spin_a(0.003)
    on(where, pairs)
    assert api._sampler.watched() == 0


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_task_and_its_first_region_get_their_own_counts(relay, where):
    def body():
        with api.task(params={"where": where}):
            with api.region("first"):
                spin_b(0.06)
            spin_a(0.12)
    on(where, body)
    assert wait_for(lambda: relay.relayed == 2)
    [task], [region] = vectors(relay, "task"), vectors(relay, "region")
    assert any("spin_a" in k for k in task) and any("spin_b" in k for k in task), task
    assert any("spin_b" in k for k in region) and not any("spin_a" in k for k in region), region
    assert sum(task.values()) > sum(region.values())


def test_a_vector_is_final_once_unwatched(monkeypatch):
    """The timer thread reads the threads' frames, then counts them into the vectors it samples. A vector
    unwatched in between is not counted: it was (from a copy of the list taken before), while its record
    was being built from it, and the daemon refused records with more keys than counts."""
    sampler = api.FrameSampler(interval=0.001)
    frames, read, resume = sys._current_frames, threading.Event(), threading.Event()

    def gated():   # holds the timer thread between reading the frames and counting them
        snapshot = frames()
        if threading.current_thread() is sampler._thread:
            read.set()
            resume.wait(10)
        return snapshot
    monkeypatch.setattr(sys, "_current_frames", gated)
    stop = threading.Event()
    worker = threading.Thread(target=lambda: [spin_a(0.001) for _ in iter(stop.is_set, True)])
    worker.start()
    try:
        counts = sampler.watch(worker.ident)
        assert read.wait(10)
        sampler.unwatch(worker.ident, counts)
        final = Counter(counts)
        later = sampler.watch(worker.ident)
        read.clear()
        resume.set()
        assert read.wait(10)                     # the next round began: the held one has counted
        assert wait_for(lambda: sum(later.values()) > 0)
        assert counts == final
        sampler.unwatch(worker.ident, later)
    finally:
        stop.set()
        worker.join(10)


@pytest.mark.parametrize("where", ["main", "thread"])
def test_phase_vectors_hold_the_programs_code_not_the_monitors(relay, monkeypatch, where):
    """A sample landing in a region's __enter__ or __exit__, or in the counters and sockets they use, goes
    to the program's frame that opened the region: the monitor's own code led such a task's vector
    (perf.py:EventGroup.read a quarter of it)."""
    monkeypatch.setattr(api._sampler, "interval", 0.001)

    def body():   # enough regions for the task's CPU time to hold samples at 1 ms on a loaded machine
        with api.task():
            for _ in range(1000):
                with api.region("outer"):
                    with api.region("inner"):
                        pass
    on(where, body)
    assert wait_for(lambda: relay.relayed == 2001, timeout=30)
    [task] = vectors(relay, "task")
    assert task and {k.split(":")[0] for k in task} == {"test_instrument.py"}, task


def _preempted() -> int:
    """This thread's involuntary context switches so far: the machine's other load taking its CPU."""
    with open("/proc/thread-self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("nonvoluntary_ctxt_switches"))


@pytest.mark.serial   # counts this machine's context switches: another test's load beside it adds its own
def test_sampling_adds_no_context_switches_to_a_main_thread_task(relay, monkeypatch):
    """The main thread is sampled by a SIGPROF handler that runs in it: a CPU-bound task of ~100 ms sampled
    every 5 ms switches no more often than with sampling off. A timer thread took the GIL from it at
    every sample: 47-70 switches against 25-34 here. Each task's switches less its preemptions (beside
    2 busy loops they made the fewest sampled 10 against 2), the fewest of three runs each; the sampled
    runs first, as a timer thread at 1 s may sleep that long."""
    preempted = []
    for interval in (0.005, 1.0):
        monkeypatch.setattr(api._sampler, "interval", interval)
        for _ in range(3):
            before = _preempted()
            with api.task(params={"interval": interval, "run": len(preempted)}):
                spin_a(0.1)
            preempted.append(_preempted() - before)
    assert wait_for(lambda: relay.relayed == 6)
    tasks = [b for k, b in relay.sender.sent if k == "task"]
    own = {b["params"]["run"]: max(b["counters"]["context_switches"] - preempted[b["params"]["run"]], 0)
           for b in tasks}
    sampled, off = ([b for b in tasks if b["params"]["interval"] == iv] for iv in (0.005, 1.0))
    assert all(sum(b["bbv"]["counts"]) >= 10 for b in sampled)
    fewest = {iv: min(own[b["params"]["run"]] for b in group) for iv, group in ((5, sampled), (1, off))}
    assert fewest[5] <= 1.2 * fewest[1] + 5, (fewest, preempted)


def test_a_tasks_cpu_after_its_last_signal_is_counted_at_its_end(relay):
    """On a loaded machine the kernel's SIGPROF came up to 90 ms of the thread's CPU apart, and a 0.1-s task
    kept 3 of its 20 samples. With the signal blocked throughout, as the worst case, the task still counts
    one sample per interval of its CPU, under the frame that ran it."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    try:
        with api.task():
            spin_a(0.1)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert wait_for(lambda: relay.relayed == 1)
    [body] = [b for k, b in relay.sender.sent if k == "task"]
    assert sum(body["bbv"]["counts"]) >= int(body["cpu_seconds"] / api._sampler.interval) - 1, body["bbv"]
    assert body["bbv"]["keys"] == ["test_instrument.py:test_a_tasks_cpu_after_its_last_signal_is_counted_at_its_end"]


def test_the_unsignalled_rest_keeps_a_vectors_shape():
    for counts, samples, after in (({"a": 3, "b": 1}, 8, {"a": 9, "b": 3}), ({"a": 2, "b": 1}, 2, {"a": 4, "b": 1}),
                                   ({}, 4, {"here": 4})):
        counts = Counter(counts)
        api._spread(counts, samples, "here")
        assert counts == after


def test_a_program_with_its_own_sigprof_handler_keeps_it(relay):
    hits = []

    def handler(signum, frame):
        hits.append(signum)
    previous = signal.signal(signal.SIGPROF, handler)
    try:
        with api.task():
            spin_a(0.1)
        assert signal.getsignal(signal.SIGPROF) is handler and not hits
    finally:
        signal.signal(signal.SIGPROF, previous)
    assert wait_for(lambda: relay.relayed == 1)
    [task] = vectors(relay, "task")
    assert any("spin_a" in k for k in task)      # sampled by the timer thread instead


def _python(program: str) -> subprocess.CompletedProcess:
    """`program` run by a new interpreter that imports this checkout's causewatch."""
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_program_that_execs_inside_a_task_is_not_killed_by_the_sampling_timer():
    """A timer that outlived exec (setitimer's do) would signal a program without the handler, which
    SIGPROF's default action kills (-27)."""
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('spun')"
    program = ("import os, sys\nfrom causewatch.agent import instrument as api\nwith api.task():\n"
               f"    os.execv(sys.executable, [sys.executable, '-c', {spin!r}])\n")
    r = _python(program)
    assert (r.returncode, r.stdout) == (0, "spun\n"), r


def test_a_forked_child_measures_its_own_thread():
    """The counters opened by the thread that forks count that thread of the parent, not the child's."""
    program = """
import os, time
from causewatch.agent import instrument as api
sent = []
api._send = lambda kind, body: sent.append(body)
with api.task():
    pass
pid = os.fork()
if pid == 0:
    t = time.thread_time()
    with api.task():
        while time.thread_time() - t < 0.2:
            pass
    print(sent[-1]["counters"]["task_clock_seconds"], sent[-1]["cpu_seconds"], flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""
    r = _python(program)
    assert r.returncode == 0 and not r.stderr, r
    clock, cpu = map(float, r.stdout.split())
    assert cpu >= 0.15 and clock >= 0.9 * cpu, r


def test_a_child_forked_inside_a_task_finishes_it_and_samples_its_own_tasks():
    program = """
import os, time
from causewatch.agent import instrument as api
sent = []
api._send = lambda kind, body: sent.append(body)
def spin():
    t = time.thread_time()
    while time.thread_time() - t < 0.1:
        pass
with api.task():
    pid = os.fork()
if pid == 0:
    with api.task():
        spin()
    print(sum(sent[-1]["bbv"]["counts"]), api._sampler.watched(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""
    r = _python(program)
    assert r.returncode == 0 and not r.stderr, r
    samples, watched = map(int, r.stdout.split())
    assert samples >= 10 and watched == 0, r

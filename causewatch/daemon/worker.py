"""A worker process of the daemon: a child that runs the daemon's entry points (the jobs at the
lowest CPU priority, SCHED_IDLE, paused while ingest has a backlog, raised to a fair share when a request
starves; the HTTP API's routes at nice 0).

Pattern: request-reply over a multiprocessing Pipe, one request at a time (`worker(entry, *args)` blocks
its caller and returns the entry point's result); while it runs, the work may `ask` the daemon (its
`host`, a `Host` at the end of this module) for what only the daemon has, the store above all. The child
is never forked from the threaded daemon: multiprocessing's fork server, a single-threaded process
started (fork and exec) with the first child, imports daemon/preload.py (the entry points' registry and
the analysis stack) once and forks every worker from itself, so the workers share those pages (copy-on-write; each
child freezes the inherited objects out of its garbage collector, which would write to them) instead
of each importing its own copy (docs/memory.md). A child starts on first use and again after it dies
(that run fails with WorkerError, the next request gets a fresh child, set up again). A request names
a calls.Entry, which the child looks up in daemon/entrypoints.py (imported there only: the daemon never
loads the analysis stack), or is a module-level function pickled by reference (tests). Arguments and
results travel pickled.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import logging
import multiprocessing as mp
import multiprocessing.forkserver
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable

from causewatch.daemon import memory
from causewatch.daemon.calls import Ask, Entry
from causewatch.daemon.cursor import Cursor

log = logging.getLogger("causewatch.daemon.worker")

LOWEST_PRIORITY = 19   # nice: the worker only takes CPU time that ingest and the agents leave over
POLL_SECONDS = 0.02    # how often a waiting request checks the child and whether ingest is busy
# A paused child resumes once ingest has been quiet this long: under steady ingest the writer's queue
# empties between batches, and resuming at each gap would let the child run most of the time.
QUIET_SECONDS = 0.25
UNPICKLABLE = (pickle.PicklingError, TypeError, AttributeError)


def _set_priority(pid: int, niceness: int, idle: bool) -> None:
    """Another process's policy (SCHED_IDLE or SCHED_OTHER) and niceness, in the order the kernel
    allows: leaving SCHED_IDLE first (it checks the current niceness against RLIMIT_NICE), then the
    niceness; entering it last."""
    if idle:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, pid, niceness)


class WorkerError(RuntimeError):
    """The worker died or was stopped while it ran a request."""


def _lower_priority(niceness: int) -> None:
    """`niceness`; at LOWEST_PRIORITY also SCHED_IDLE (runs only on a CPU nothing else wants, and any
    woken daemon thread preempts it)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
        if niceness == LOWEST_PRIORITY:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as e:   # a sandbox that forbids it: analyses still run, only not deprioritised
        log.warning("worker process: cannot lower its priority fully (%s)", e)


def _die_with(daemon: int) -> None:
    """SIGKILL this child when the daemon dies (prctl PR_SET_PDEATHSIG). A child the daemon paused
    (SIGSTOP) would otherwise outlive a killed daemon, stopped for good: SIGKILL is the one signal a
    stopped process still acts on. The child's parent is the fork server, which exits once the write
    end of its "alive" pipe is closed everywhere: multiprocessing gives each child a copy (to fork
    children of its own, which a worker never does), closed here, so only the daemon holds one."""
    alive = getattr(multiprocessing.forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        multiprocessing.forkserver._forkserver._forkserver_alive_fd = None
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    try:
        os.kill(daemon, 0)
    except ProcessLookupError:   # the daemon died before the prctl
        os._exit(0)


# The registry of entry points, imported by name in the workers alone (with PRELOAD, the modules named by a
# string; tests/daemon/test_entrypoints.py resolves them and every calls.Entry through them).
ENTRYPOINTS = "causewatch.daemon.entrypoints"
# What the fork server imports before it forks any worker: the registry, the analysis stack, numba readied.
PRELOAD = ["causewatch.daemon.preload"]


def resolve(fn):
    """fn itself, or the entry point a calls.Entry key names (the registry is imported on first use)."""
    if isinstance(fn, Entry):
        return importlib.import_module(ENTRYPOINTS).ENTRY_POINTS[fn]
    return fn


def _name(fn) -> str:
    return str(fn) if isinstance(fn, Entry) else fn.__qualname__


_daemon = None   # in the child: its end of the pipe, for ask()


def ask(kind: Ask, *args):
    """From work running in the child: the daemon's host answers host(kind, *args) (its error is raised here)."""
    if _daemon is None:
        raise WorkerError(f"ask({kind!r}): not in a worker process")
    _daemon.send(("ask", kind, args))
    ok, value = _daemon.recv()
    if not ok:
        raise value
    return value


def _serve(conn, niceness: int, daemon: int, name: str = "") -> None:
    global _daemon
    _die_with(daemon)
    if name:   # what ps and top show for this process (prctl PR_SET_NAME, 15 bytes)
        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15])
    gc.freeze()   # what the fork server loaded stays shared: a collection would write to each object it visits
    # numba's thread pool guards its start with a lock of the start method's kind: under the fork server a
    # named semaphore, which a worker killed at the daemon's stop leaves to the resource tracker (a "leaked
    # semaphore" warning on the daemon's stderr, after its last line). A worker starts no processes itself.
    mp.set_start_method("fork", force=True)
    _lower_priority(niceness)
    # A terminal's Ctrl-C reaches the whole process group: the daemon decides, and the worker ends with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _daemon = conn
    while True:
        try:
            fn, args = conn.recv()
        except EOFError:   # the daemon went away
            return
        try:
            reply = ("done", True, resolve(fn)(*args), "")
        except Exception as e:
            reply = ("done", False, e, traceback.format_exc())
        try:
            conn.send(reply)
        except UNPICKLABLE as e:
            conn.send(("done", False, WorkerError(f"{_name(fn)}: its reply cannot be sent back ({e})"), ""))
        del reply, args
        gc.collect()   # the request's frames and tables, then their memory back to the system, while it waits
        memory.trim()


class Worker:
    """`worker(entry, *args)` runs the entry point (or module-level function) in the child and returns
    its result or raises its exception.

    host : a callable, host(kind, *args), that answers the child's `ask`s in the daemon (on the caller's
        thread, while the child waits); its exceptions are raised in the child.
    setup : (entry, args) run first in each new child (e.g. Entry.INSTALL_JOBS); its result is `setup_`.
    busy : a callable, true while the daemon's own work should go first (ingest's writer has a backlog);
        the child is then stopped (SIGSTOP) until busy has been false for QUIET_SECONDS, for at most
        max_pause s at a stretch, and afterwards runs at least min_run s (default max_pause / 4), so under
        sustained load an analysis still finishes, at a fifth of its pace or better. paused_seconds
        counts the pauses.
    starved_after : seconds a request may run before the child is raised to SCHED_OTHER at
        `starved_nice` until it ends (0: never; a request may bring its own, as a job's run its
        interval: scheduler.WorkerJobs): at SCHED_IDLE it gets no CPU while every core is busy,
        and contention is when the analyses must run (no model had been learnt during a CPU hog).
        Nice 10 is about a tenth of a nice-0 process's share: a learner beside a hog still learns, and
        ingest beside it keeps most of its rate, far more than at nice 0 (docs/perf-log.md, "A starved
        request's niceness"). The pacing above still
        stops it while ingest has a backlog. Raising needs CAP_SYS_NICE or an RLIMIT_NICE of
        20 - starved_nice (the systemd unit's LimitNICE); without, a warning, once.
        raised_seconds counts the time raised.
    """

    def __init__(self, niceness: int = LOWEST_PRIORITY, busy=None, max_pause: float = 2.0, min_run: float | None = None,
                 host=None, setup: tuple | None = None, name: str = "causewatch-worker", starved_after: float = 0.0,
                 starved_nice: int = 10):
        self.niceness = niceness
        self.starved_after, self.starved_nice = starved_after, starved_nice
        self._raised_total = 0.0
        self._raised_at: float | None = None
        self._sent_at = 0.0
        self._cannot_raise = False
        self.busy, self.max_pause = busy, max_pause
        self.min_run = max_pause / 4 if min_run is None else min_run
        self.host, self.setup, self.name = host, setup, name
        self.setup_ = None
        self.paused_seconds = 0.0
        self._paused_at: float | None = None
        self._ran_from = self._busy_at = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._proc: mp.process.BaseProcess | None = None
        self._conn = None
        self.last_used = time.monotonic()   # when its last request ended

    def __call__(self, fn, *args, starved_after: float | None = None):
        """`starved_after`: this request's own threshold (None: the worker's)."""
        with self._lock:
            try:
                self._start()
                return self._request(fn, args, self.starved_after if starved_after is None else starved_after)
            finally:
                self.last_used = time.monotonic()

    def start(self):
        """Start the child now (and set it up); returns `setup_`."""
        with self._lock:
            self._start()
            return self.setup_

    def _request(self, fn, args, starved_after: float):
        if self._stopping.is_set():
            raise WorkerError("the daemon is stopping")
        try:
            self._conn.send((fn, args))
            self._ran_from = self._sent_at = time.monotonic()
            while True:
                while not self._conn.poll(POLL_SECONDS):
                    if self._stopping.is_set() or not self._proc.is_alive():
                        raise EOFError
                    self._pace()
                    self._guard(starved_after)
                self._resume()
                message = self._conn.recv()
                if message[0] == "done":
                    break
                self._answer(*message[1:])
            self._lower()
        except (EOFError, OSError) as e:
            self._resume()
            self._lower()
            code = self._discard()
            raise WorkerError(f"{self.name} ended (exit code {code}) during {_name(fn)}") from e
        _, ok, value, trace = message
        if not ok:
            if trace:
                value.add_note(f"in {self.name}:\n{trace}")
            raise value
        return value

    def _answer(self, kind: Ask, args: tuple) -> None:
        """The child asked host(kind, *args): send back (True, result) or (False, error)."""
        try:
            if self.host is None:
                raise WorkerError(f"ask({kind!r}): this worker has no host")
            answer = (True, self.host(kind, *args))
        except Exception as e:
            answer = (False, e)
        try:
            self._conn.send(answer)
        except UNPICKLABLE as e:
            self._conn.send((False, WorkerError(f"ask({kind!r}): its answer cannot be sent ({e})")))

    def _pace(self) -> None:
        """Stop the child while ingest is busy, for at most max_pause s at a stretch, then let it run at
        least min_run s."""
        if self.busy is None:
            return
        now = time.monotonic()
        if self.busy():
            self._busy_at = now
        if self._paused_at is None:
            if self._busy_at == now and now - self._ran_from >= self.min_run:
                os.kill(self._proc.pid, signal.SIGSTOP)
                self._paused_at = now
        elif now - self._paused_at >= self.max_pause or now - self._busy_at >= QUIET_SECONDS:
            self._resume()

    def _guard(self, starved_after: float) -> None:
        """Raise a child whose request has run starved_after s to SCHED_OTHER at starved_nice."""
        if not starved_after or self._raised_at is not None or self._cannot_raise:
            return
        now = time.monotonic()
        if now - self._sent_at < starved_after or self.niceness <= self.starved_nice:
            return
        try:
            _set_priority(self._proc.pid, self.starved_nice, idle=False)
        except PermissionError as e:
            self._cannot_raise = True
            log.warning("%s: a request ran %.0f s, but its priority cannot be raised to nice %d (%s): give the "
                        "daemon CAP_SYS_NICE or LimitNICE=+%d (its systemd unit has it)", self.name,
                        now - self._sent_at, self.starved_nice, e, self.starved_nice)
            return
        except ProcessLookupError:
            return
        self._raised_at = now
        log.info("%s: a request ran %.0f s; raised to nice %d until it ends", self.name, now - self._sent_at,
                 self.starved_nice)

    @property
    def raised_seconds(self) -> float:
        """Seconds the child has run raised, the current stretch included."""
        now = time.monotonic()
        return self._raised_total + (now - self._raised_at if self._raised_at is not None else 0.0)

    def _lower(self) -> None:
        if self._raised_at is None:
            return
        self._raised_total += time.monotonic() - self._raised_at
        self._raised_at = None
        try:
            _set_priority(self._proc.pid, self.niceness, idle=self.niceness == LOWEST_PRIORITY)
        except (ProcessLookupError, PermissionError) as e:
            log.warning("%s: cannot lower its priority again (%s)", self.name, e)

    def _resume(self) -> None:
        if self._paused_at is None:
            return
        try:
            os.kill(self._proc.pid, signal.SIGCONT)
        except ProcessLookupError:   # it died while paused: the caller finds out
            pass
        now = time.monotonic()
        self.paused_seconds += now - self._paused_at
        self._paused_at, self._ran_from = None, now

    def stop(self) -> None:
        """Ends the child now, even mid-request (a re-learn is repeated after a restart, nothing is lost)."""
        self._stopping.set()
        if self._proc is not None:
            self._proc.terminate()
        with self._lock:
            self._discard()

    def retire(self, idle: float) -> bool:
        """End the child if no request has run for `idle` s (the next request forks a new one from the fork
        server, in milliseconds: its memory is given back meanwhile); False if it is busy or was used since."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._proc is None or time.monotonic() - self.last_used < idle:
                return False
            self._discard()
            log.info("%s ended after %.0f s without a request", self.name, idle)
            return True
        finally:
            self._lock.release()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def _start(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        if self._stopping.is_set():
            raise WorkerError("the daemon is stopping")
        self._discard()
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)   # read when the fork server starts, with the first child
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.niceness, os.getpid(), self.name), name=self.name,
                                 daemon=True)
        self._proc.start()
        child.close()
        log.info("%s started (pid %d, nice %d)", self.name, self._proc.pid, self.niceness)
        if self.setup is not None:
            try:
                self.setup_ = self._request(*self.setup, self.starved_after)
            except Exception:   # e.g. a config the jobs refuse: the next request tries a new child
                self._discard()
                raise

    def _discard(self) -> int | None:
        if self._proc is None:
            return None
        self._proc.kill()
        self._proc.join(5)
        self._conn.close()
        code, self._proc, self._conn = self._proc.exitcode, None, None
        return code


class Host:
    """The daemon's side of its workers' asks (calls.Ask): a query on a new store cursor (its rows go back
    as Python rows or an Arrow table, so pandas is loaded only in the worker: the daemon stays the only
    process that opens the DuckDB file), a write on the writer thread, a command to an agent, gauges to
    the exporter. host(kind, *args) dispatches through `handlers`; its exception is raised in the worker."""

    def __init__(self, cursor: Callable[[], Cursor], write: Callable, send: Callable, exporter):
        self.cursor = cursor
        self.handlers: dict[Ask, Callable] = {Ask.ROWS: self.rows, Ask.ARROW: self.arrow, Ask.WRITE: write,
                                              Ask.READ: self.read, Ask.SEND: send, Ask.PUBLISH: exporter.publish}

    def __call__(self, kind: Ask, *args):
        handler = self.handlers.get(kind)
        if handler is None:
            raise WorkerError(f"ask({kind!r}): the daemon answers {', '.join(self.handlers)}")
        return handler(*args)

    def rows(self, sql: str, params) -> tuple[list, list]:
        """(description as [(name,)], rows) of a query."""
        with self.cursor() as con:
            cur = con.execute(sql, params)
            return [(d[0],) for d in cur.description or []], cur.fetchall()

    def read(self, fn: Callable):
        """fn(cursor) on a new store cursor, in the thread that answers the worker (not the writer's)."""
        with self.cursor() as con:
            return fn(con)

    def arrow(self, sql: str, params):
        with self.cursor() as con:
            return con.sql(sql, params=params).to_arrow_table()

"""Task and region records from instrumented programs: `with task(app, params={...}):`, `with region(name):`.

Each measures the calling thread (perf software/hardware counters, CPU wait, wall and CPU time, a
Python-level phase vector: FrameSampler) and sends one record to the local agent's
ipc socket, or, when no agent listens there, straight to the daemon through a Sender spooling under
SPOOL/instrument (a stable name: the agent and the next such run deliver what is left there). The
agent tells a command it launches where it is through the CAUSEWATCH_* environment (ENVIRONMENT).
Monitoring never raises into the program; one that reaches neither an agent nor a daemon says so
once at WARNING.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import itertools
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections import Counter

import msgpack
import zmq

from causewatch import config
from causewatch.agent import cputimer, perf
from causewatch.agent.sender import INSTRUMENT_SPOOL, Sender
from causewatch.config import AgentConfig

log = logging.getLogger(__name__)
MAX_KEY = 256
# AgentConfig setting -> the variable an agent sets for the command it launches (read by `configure`)
ENVIRONMENT = {"ipc": "CAUSEWATCH_IPC", "daemon": "CAUSEWATCH_DAEMON", "node": "CAUSEWATCH_NODE",
               "spool": "CAUSEWATCH_SPOOL", "server_key": "CAUSEWATCH_SERVER_KEY",
               "client_key": "CAUSEWATCH_CLIENT_KEY"}


def environment(cfg: AgentConfig, config_file: str | None = None) -> dict[str, str]:
    """The variables that lead an instrumented program to this agent (and its daemon, spool and keys)."""
    env = {var: str(getattr(cfg, key)) for key, var in ENVIRONMENT.items() if getattr(cfg, key) is not None}
    if config_file:
        env["CAUSEWATCH_CONFIG"] = os.path.abspath(config_file)
    return env


_OWN_FOLDER = os.path.dirname(__file__)   # causewatch/agent: the monitor's own code
_LIBRARY_DEPTH = 8   # how far below the monitor's code the library code it calls (pyzmq, threading) may reach
OTHER, OWN, WRAPPER = 0, 1, 2   # a code object's role: the program's, the monitor's, the decorators' wrapper


class FrameSampler:
    """Samples the innermost Python frame of every thread inside a task or region into its vectors.

    A Python program's native IPs all land in the interpreter loop; its code objects are what tell
    phases apart, so the vector keys are 'file.py:qualname'. The main thread is sampled by a SIGPROF
    handler, one count per `interval` of its CPU time (cputimer): the handler runs in that thread, so
    sampling adds no context switch to what its counters measure. Other threads, and the main thread of
    a program that has SIGPROF for itself, are sampled by a timer thread every `interval` of wall time,
    which takes the GIL from them (a switch or two a sample). Once `unwatch` returns, nothing touches
    that vector again.
    """

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self._threads: dict[int, list[Counter]] = {}   # the timer thread's, under _lock
        self._main: list[Counter] = []                  # the SIGPROF handler's: only the main thread touches it
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._codes: dict = {}
        self._thread: threading.Thread | None = None
        self._handler = self._on_sigprof                # one bound method, so that getsignal can be compared
        self._timer: cputimer.ThreadCpuTimer | None = None
        self._claimed = self._armed = False
        self._mark = self._carry = self._left = 0.0

    def watch(self, tid: int) -> Counter:
        counts: Counter = Counter()
        if tid == threading.main_thread().ident == threading.get_ident() and (self._armed or self._signals()):
            if not self._armed:
                self._arm()
            self._main.append(counts)
            return counts
        with self._lock:
            self._threads.setdefault(tid, []).append(counts)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="causewatch-frames", daemon=True)
                self._thread.start()
        self._wake.set()
        return counts

    def unwatch(self, tid: int, counts: Counter) -> None:
        """Stop sampling into `counts` (matched by identity: a task and its first region often hold equal
        vectors); from its return `counts` is final."""
        if tid == threading.main_thread().ident and any(c is counts for c in self._main):
            if self._armed:   # not in a child forked inside a task: it has no timer
                self._credit_rest(sys._getframe(1))
            _remove(self._main, counts)
            if not self._main and self._armed:
                self._disarm()
            return
        with self._lock:
            stack = self._threads.get(tid, [])
            _remove(stack, counts)
            if not stack:
                self._threads.pop(tid, None)

    def watched(self) -> int:
        """How many vectors are being sampled now (a program between tasks has none)."""
        with self._lock:
            return len(self._main) + sum(len(stack) for stack in self._threads.values())

    def _signals(self) -> bool:
        """Whether SIGPROF can sample the main thread: its handler is ours, or SIGPROF is unclaimed (its
        default action) and becomes ours; never over a handler of the program's. Called on that thread."""
        try:
            handler = signal.getsignal(signal.SIGPROF)
            if handler is not self._handler and handler != signal.SIG_DFL:
                return False
            if self._timer is None:
                self._timer = cputimer.ThreadCpuTimer(signal.SIGPROF)
            if handler is not self._handler:
                signal.signal(signal.SIGPROF, self._handler)
                signal.siginterrupt(signal.SIGPROF, False)   # the kernel restarts a system call it interrupts
        except (AttributeError, ValueError, OSError):   # no SIGPROF or timers here, or not the interpreter's
            return False
        if not self._claimed:
            self._claimed = True
            os.register_at_fork(after_in_child=self._forked)
        return True

    def _arm(self) -> None:
        """Start the timer where the last task left it, so that short tasks are sampled in turn."""
        self._mark = time.thread_time() - min(self._carry, self.interval)
        self._timer.set(min(self._left, self.interval) or self.interval, self.interval)
        self._armed = True

    def _disarm(self) -> None:
        self._left = self._timer.set(0, 0)
        self._carry = time.thread_time() - self._mark
        self._armed = False

    def _on_sigprof(self, signum, frame) -> None:
        """One count per `interval` of the main thread's CPU since the last: a signal that waited for a
        long C call to return credits that call's caller with all of it."""
        samples = int((time.thread_time() - self._mark) / self.interval)
        if samples <= 0 or frame is None:
            return
        self._mark += samples * self.interval
        key = self._key_of(frame)
        for counts in self._main:
            counts[key] += samples

    def _credit_rest(self, frame) -> None:
        """The CPU since the last signal, spread over each vector as its samples are (all to `frame`'s key
        in one that has none): on a loaded machine the kernel's signals can come many intervals apart, and a
        task's last stretch went uncounted."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})   # no handler between read and add
        try:
            samples = int((time.thread_time() - self._mark) / self.interval)
            if samples > 0:
                self._mark += samples * self.interval
                fallback = frame and self._key_of(frame)
                for counts in self._main:
                    _spread(counts, samples, fallback)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _forked(self) -> None:
        self._timer, self._armed = None, False   # a child has no timers: it makes its own

    def _code(self, code) -> tuple[str, int]:
        """(key, role) of a code object, worked out once."""
        known = self._codes.get(code)
        if known is None:
            key = f"{os.path.basename(code.co_filename)}:{getattr(code, 'co_qualname', code.co_name)}"
            key = "".join(c if c.isprintable() else "?" for c in key)[:MAX_KEY]
            role = OTHER if os.path.dirname(code.co_filename) != _OWN_FOLDER else \
                WRAPPER if code.co_name == "measured" else OWN
            known = self._codes[code] = (key, role)
        return known

    def _key_of(self, frame) -> str:
        """The key of the innermost frame that is the program's: past the monitor's own frames (a sample
        that lands in a region's __enter__ or the counters it reads) and the library code they called."""
        key, role = self._code(frame.f_code)
        if role == OTHER:
            caller = self._monitor_caller(frame)
            if caller is None:
                return key
            frame, (key, role) = caller, self._code(caller.f_code)
        while role != OTHER and frame.f_back is not None:
            frame = frame.f_back
            key, role = self._code(frame.f_code)
        return key

    def _monitor_caller(self, frame):
        """The monitor's frame among the first _LIBRARY_DEPTH callers of `frame`; None when the program's
        own code, or the wrapper that runs a decorated function, comes first."""
        caller = frame.f_back
        for _ in range(_LIBRARY_DEPTH):
            if caller is None:
                return None
            role = self._code(caller.f_code)[1]
            if role == OWN:
                return caller
            if role == WRAPPER:
                return None
            caller = caller.f_back
        return None

    def _loop(self) -> None:
        while True:
            with self._lock:
                idle = not self._threads
                if idle:
                    self._wake.clear()     # under the lock: a watch after this sets it again
            if idle:
                self._wake.wait()
                continue
            frames = sys._current_frames()
            with self._lock:               # so that unwatch, under it, leaves a vector no one touches after
                for tid, stack in self._threads.items():
                    frame = frames.get(tid)
                    if frame is not None:
                        key = self._key_of(frame)
                        for counts in stack:
                            counts[key] += 1
            del frames
            time.sleep(self.interval)


def _spread(counts: Counter, samples: int, fallback: str | None) -> None:
    """`samples` added to `counts` in proportion to what it holds (its heaviest key takes what rounding
    leaves over), so the vector keeps its shape; all to `fallback` when it holds none."""
    total = sum(counts.values())
    if not total:
        if fallback:
            counts[fallback] += samples
        return
    added = 0
    for key, n in list(counts.items()):
        share = samples * n // total
        counts[key] += share
        added += share
    counts[max(counts, key=counts.__getitem__)] += samples - added


def _remove(stack: list, item) -> bool:
    """Remove `item` itself (not an equal one) from `stack`; whether it was there."""
    for i, other in enumerate(stack):
        if other is item:
            del stack[i]
            return True
    return False


class _ThreadCounters(threading.local):
    """The calling thread's perf counters and schedstat file, opened on first use, and again in a forked
    child, whose thread they do not measure; their fds close with the thread."""

    collector: perf.CounterCollector | None = None
    schedstat = None
    owner: int | None = None    # the native id of the thread they were opened for

    def _mine(self) -> None:
        tid = threading.get_native_id()
        if tid != self.owner:
            self.collector, self.schedstat, self.owner = perf.thread_counters(), None, tid

    def read(self) -> tuple[dict[str, float | None], float | None]:
        """The thread's cumulative perf counts, and the seconds it has spent runnable but waiting on a run
        queue for a CPU (its CPU contention; /proc/thread-self/schedstat, read again from offset 0, as an
        open costs ten reads), None where the kernel keeps no schedstat."""
        self._mine()
        try:
            if self.schedstat is None:
                self.schedstat = open("/proc/thread-self/schedstat", "rb", buffering=0)
            waited = int(os.pread(self.schedstat.fileno(), 128, 0).split()[1]) * 1e-9
        except (OSError, IndexError, ValueError):
            waited = None
        return self.collector.totals(), waited


class Transport:
    """Where records go: the local agent's ipc socket (ZeroMQ PUSH) if one listens, else a Sender."""

    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        self._push = self._sender = None
        self._lock = threading.Lock()

    def _open(self) -> None:
        if listening(self.cfg.ipc):
            self._push = zmq.Context.instance().socket(zmq.PUSH)
            self._push.setsockopt(zmq.LINGER, 5000)          # deliver what is queued at exit
            self._push.connect(self.cfg.ipc)
        else:
            spool = os.path.join(os.path.expanduser(self.cfg.spool), INSTRUMENT_SPOOL)
            self._sender = Sender(dataclasses.replace(self.cfg, spool=spool)).start()
            log.info("no agent listens on %s: sending straight to %s", self.cfg.ipc, self.cfg.daemon)

    def send(self, kind: str, body: dict) -> None:
        with self._lock:
            if self._push is None and self._sender is None:
                self._open()
            if self._push is not None:   # never block the program: a gone agent costs records, not time
                try:
                    self._push.send(msgpack.packb({"type": kind, "body": body}, use_bin_type=True), zmq.NOBLOCK)
                except zmq.Again:
                    log.warning("causewatch: the agent on %s takes no records; %s dropped", self.cfg.ipc, kind)
            else:
                self._sender.send(kind, body)

    def close(self, timeout: float = 5.0) -> bool:
        """Deliver what is queued (up to `timeout` s); True when nothing is left behind."""
        with self._lock:
            ok = True
            if self._push is not None:
                self._push.close(linger=int(timeout * 1000))
            if self._sender is not None:
                ok = self._sender.flush(timeout)
                if not self._sender.connected.is_set():
                    _warn_unreachable(self.cfg, self._sender.unacked)
                self._sender.close()
            self._push = self._sender = None
            return ok


# "off": task and region measure as ever, and their records go nowhere (a probe kit's runs of a program's
# tasks are the kit's, not the application's data)
OFF = "CAUSEWATCH_INSTRUMENT"


class _Discard:
    """The transport while OFF is "off": drops every record."""

    def send(self, kind: str, body: dict) -> None:
        pass

    def close(self, timeout: float = 5.0) -> bool:
        return True


def _transport_for(cfg: AgentConfig) -> "Transport | _Discard":
    return _Discard() if os.environ.get(OFF) == "off" else Transport(cfg)


_warned = threading.Event()


def _warn_unreachable(cfg: AgentConfig, kept: int) -> None:
    if not _warned.is_set():
        _warned.set()
        log.warning("causewatch: no agent listens on %s and no daemon answered at %s; %d records wait in %s/%s "
                    "for the agent or the next run (set CAUSEWATCH_CONFIG, or start the program under "
                    "`causewatch agent -- CMD`)", cfg.ipc, cfg.daemon, kept, cfg.spool, INSTRUMENT_SPOOL)


def listening(endpoint: str) -> bool:
    """True when something accepts connections on an ipc:// endpoint's unix socket."""
    if not endpoint.startswith("ipc://"):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(endpoint[len("ipc://"):])
            return True
        except OSError:
            return False


_sampler = FrameSampler()
_counters = _ThreadCounters()
_transport: Transport | None = None
_app = os.environ.get("CAUSEWATCH_APP") or os.path.splitext(os.path.basename(sys.argv[0] or "python"))[0] \
    or "python"
_ids = itertools.count(1)


def configure(app: str | None = None, config_file: str | None = None, sample_interval: float | None = None,
              **settings) -> AgentConfig:
    """Set the default app name and where records go (AgentConfig settings: ipc, daemon, node, spool…).

    Without a call, the config comes from $CAUSEWATCH_CONFIG (table [agent]) or the defaults, with the
    CAUSEWATCH_* variables of ENVIRONMENT (set by an agent for the command it launches) over it.
    """
    global _transport, _app
    if app:
        _app = app
    if sample_interval:
        _sampler.interval = sample_interval
    if _transport is not None:
        _transport.close()
    from_env = {key: os.environ[var] for key, var in ENVIRONMENT.items() if os.environ.get(var)}
    cfg = config.load(AgentConfig, config_file or os.environ.get("CAUSEWATCH_CONFIG"), "agent",
                      **{**from_env, **settings})
    _transport = _transport_for(cfg)
    return cfg


def flush(timeout: float = 5.0) -> bool:
    """Deliver every record sent so far; called at interpreter exit too."""
    global _transport
    if _transport is None:
        return True
    ok = _transport.close(timeout)
    _transport = None
    return ok


atexit.register(flush)


def _send(kind: str, body: dict) -> None:
    global _transport
    try:
        if _transport is None:
            configure()
        _transport.send(kind, body)
    except Exception as e:   # monitoring must never break the program it watches
        log.warning("causewatch: %s record not sent: %s", kind, e)


class _Measured:
    """Shared by task and region: a context manager, and a decorator measuring each call."""

    kind = ""

    def __enter__(self):
        self._tid = threading.get_ident()
        self._c0, self._waited0 = _counters.read()
        self._vector = _sampler.watch(self._tid)
        self._t0, self._cpu0 = time.time(), time.thread_time()
        return self

    def __exit__(self, exc_type, exc, tb):
        duration, cpu = time.time() - self._t0, time.thread_time() - self._cpu0
        _sampler.unwatch(self._tid, self._vector)
        c1, waited = _counters.read()
        counters = {k: v - self._c0[k] for k, v in c1.items() if v is not None and self._c0.get(k) is not None}
        counters.update(perf.derive(c1, self._c0))
        if waited is not None and self._waited0 is not None:
            counters["cpu_wait_seconds"] = waited - self._waited0
        body = {"app": self.app, "start": self._t0, "duration": duration, "cpu_seconds": cpu,
                "counters": counters, **self._fields()}
        if self._vector:
            body["bbv"] = {"keys": list(self._vector), "counts": list(self._vector.values())}
        extra = {"thread": threading.current_thread().name, "pid": os.getpid(), **self._extra()}
        if exc_type is not None:
            extra["exception"] = exc_type.__name__
        body["extra"] = extra
        _send(self.kind, body)
        return False

    def _fields(self) -> dict:
        raise NotImplementedError

    def _extra(self) -> dict:
        return {}

    def _fresh(self) -> "_Measured":
        raise NotImplementedError

    def __call__(self, fn):
        @functools.wraps(fn)
        def measured(*args, **kwargs):
            with self._fresh():
                return fn(*args, **kwargs)
        return measured


class task(_Measured):
    """One master-worker task: `params` are its inputs (what the causal model learns from)."""

    kind = "task"

    def __init__(self, app: str | None = None, params: dict | None = None, task_id: str | None = None):
        self.app, self.params, self.task_id = app or _app, dict(params or {}), task_id

    def _fields(self) -> dict:
        return {"task_id": self.task_id or f"{os.getpid()}-{next(_ids)}", "params": self.params}

    def _fresh(self) -> "task":
        return task(self.app, self.params)


class _OpenRegions(threading.local):
    """The calling thread's regions entered and not yet left, innermost last."""

    def __init__(self):
        self.names: list[str] = []


_open_regions = _OpenRegions()


class region(_Measured):
    """One call of a named code region (what the fuzzy bottleneck scores rank). A region entered
    inside another on the same thread names it as `extra.parent` (the base of the papers' Eq. 1)."""

    kind = "region"

    def __init__(self, name: str, app: str | None = None):
        self.name, self.app = name, app or _app

    def __enter__(self):
        names = _open_regions.names
        self._parent = names[-1] if names else None
        names.append(self.name)
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        _open_regions.names.pop()
        return super().__exit__(exc_type, exc, tb)

    def _fields(self) -> dict:
        return {"region": self.name, "calls": 1}

    def _extra(self) -> dict:
        return {"parent": self._parent} if self._parent else {}

    def _fresh(self) -> "region":
        return region(self.name, self.app)

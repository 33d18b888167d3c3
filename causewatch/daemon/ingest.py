"""Daemon ingest: a ROUTER socket in front of one DuckDB writer thread.

Pattern: ack-after-commit. The IO thread decodes and validates each frame (nack at once when it
is refused); the writer thread commits batches in one transaction each and only then queues the
acks, which the IO thread sends. Between them a queue bounded in bytes (max_queue_bytes): when it
is full the IO thread waits, acks stop and the agents' credit runs out, so they wait. What the agents
may send before an ack is granted by the daemon in bytes (daemon/credit.py: max_in_flight_bytes shared
among the connected agents), so ZeroMQ's buffers stay bounded however many connect. Agents resend
what was not acked and the store drops what it already has, so every acknowledged frame is in
DuckDB exactly once.

Trust: replies go to the routing id ZeroMQ assigned to the connection (a peer that chooses its own
is refused, so no one can take over another agent's acks). With CURVE keys a frame's `node` must be
the name its key was authorized under; without keys the daemon binds loopback only and trusts it.
"""

from __future__ import annotations

import collections
import logging
import resource
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from causewatch import wire
from causewatch.config import DaemonConfig, is_loopback
from causewatch.daemon.authorized import AuthorizedKeys
from causewatch.daemon.credit import CreditGrants
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.store import Store
from causewatch.errors import ConfigError, WireError

log = logging.getLogger("causewatch.daemon.ingest")
_STOP = object()
_KEYS_CHECK_SECONDS = 1.0
# Messages the IO thread takes off the ROUTER in a row at most, before it forwards the writer's acks.
RECEIVE_AT_ONCE = 256
# A gathering writer commits once no frame came for QUIET_GAPS x the mean of the last ARRIVALS_KEPT
# frames' gaps: agents that wait for acks have stopped sending, while the gaps of agents on a clock
# (exponential, about) pass that 1 time in 3,000; and never sooner than 1.5 RECEIVE_TICKs, as the IO
# thread puts a tick's frames at once.
QUIET_GAPS, ARRIVALS_KEPT = 8.0, 33
# While the writer gathers several agents' frames, the IO thread sleeps this long after each drain of the
# ROUTER (seconds): the acks wait at most this more, and a wake reads the frames of a tick, not one or
# two, as a wake's cost is mostly cold caches (docs/perf-log.md, "Group commit (`commit_delay`), 2026-12-02").
RECEIVE_TICK = 0.1


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (each agent holds a descriptor); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, e)
    return soft


def _recv_parts(sock: zmq.Socket, flags: int = 0) -> list[zmq.Frame]:
    """A whole message as zero-copy frames. recv_multipart asks the socket for RCVMORE after each part;
    a frame knows it: 2.4 us a two-part message instead of 5-7 (an ack message has 2 parts a frame)."""
    parts = [sock.recv(flags, copy=False)]
    while parts[-1].more:
        parts.append(sock.recv(copy=False))
    return parts


def _has_property(part: zmq.Frame, name: str) -> bool:
    try:
        return part.get(name) is not None
    except zmq.ZMQError:   # ZeroMQ's answer for a property the peer did not send
        return False


class LogLimit:
    """At most `burst` log lines per reason per `period` seconds; the rest are counted and summarised."""

    def __init__(self, burst: int = 5, period: float = 10.0, clock=time.monotonic):
        self.burst, self.period, self.clock = burst, period, clock
        self._window: dict[str, list] = {}   # reason -> [window start, lines logged, lines suppressed]

    def allow(self, reason: str) -> bool:
        now = self.clock()
        w = self._window.setdefault(reason, [now, 0, 0])
        if now - w[0] >= self.period:
            if w[2]:
                log.warning("%d more refusals for reason %s in %.0f s were not logged", w[2], reason, now - w[0])
            w[:] = [now, 0, 0]
        w[1] += 1
        if w[1] > self.burst:
            w[2] += 1
            return False
        return True


class WorkQueue:
    """The writer's work (frames, calls), bounded in bytes of frames rather than in items: the IO thread's
    `put` waits while `max_bytes` are queued; one frame always fits, and calls cost nothing."""

    def __init__(self, max_bytes: int, least_patience: float = 0.0):
        """`least_patience`: the quiet rule waits at least this (s): the IO thread puts a tick's frames at once."""
        self.max_bytes, self.bytes, self.least_patience = max_bytes, 0, least_patience
        self._items: collections.deque = collections.deque()   # (item, size)
        self._sizeless = 0      # calls and the stop queued: a writer gathering frames takes them at once
        self._changed = threading.Condition()
        # what wakes a gathering writer early (items, bytes), and when the latest frames arrived
        self._enough: tuple[float, float] = (1, 0)
        self._arrivals: collections.deque = collections.deque(maxlen=ARRIVALS_KEPT)

    def put(self, item, size: int = 0) -> None:
        with self._changed:
            while size and self.bytes and self.bytes + size > self.max_bytes:
                self._changed.wait()
            self._items.append((item, size))
            self.bytes += size
            self._sizeless += not size
            if size:
                self._arrivals.append(time.monotonic())
            # the writer waits for a first item, or gathers until `_enough`: a frame that changes neither
            # wakes nobody (a wake per frame had cost the writer a thread switch per frame)
            if len(self._items) >= self._enough[0] or self.bytes >= self._enough[1] or not size:
                self._changed.notify_all()

    def gather(self, until: float, most: int, most_bytes: float) -> None:
        """Wait until `until` (monotonic) for `most` items or `most_bytes` of them, returning sooner when
        a call is queued, the queue is half full (the IO thread must not wait for the writer's leisure) or
        frames stopped coming: no frame for QUIET_GAPS times the recent mean gap between frames, as
        when every agent waits for its acks (agents sending on a clock keep their gaps)."""
        with self._changed:
            self._enough = (most, min(most_bytes, self.max_bytes / 2))
            try:
                while len(self._items) < most and self.bytes < self._enough[1] and not self._sizeless:
                    now = time.monotonic()
                    left = until - now
                    if left <= 0:
                        return
                    patience = self._patience()
                    if patience is not None:
                        quiet = now - self._arrivals[-1]
                        if quiet >= patience:
                            return
                        left = min(left, patience - quiet)
                    self._changed.wait(left)
            finally:
                self._enough = (1, 0)

    def _patience(self) -> float | None:
        """QUIET_GAPS x the mean gap between the recent frames' arrivals (None before there are gaps): a
        mean, not a median, as senders' frames come in bursts (the gaps within a burst are tiny)."""
        times = self._arrivals
        if len(times) < 3:
            return None
        return max(self.least_patience, QUIET_GAPS * (times[-1] - times[0]) / (len(times) - 1))

    def unbound(self) -> None:
        """Let every waiting and later `put` through: the writer has stopped, so nothing frees bytes (what is
        put now is never acked, and the agents resend it)."""
        with self._changed:
            self.max_bytes = float("inf")
            self._changed.notify_all()

    def take(self, most: int, most_bytes: float = float("inf")) -> list:
        """Wait for work; return up to `most` items, oldest first, of at most `most_bytes` together (the
        first item whatever its size)."""
        with self._changed:
            while not self._items:
                self._changed.wait()
            items = [self._items.popleft()]
            taken = items[0][1]
            while self._items and len(items) < most and taken + self._items[0][1] <= most_bytes:
                items.append(self._items.popleft())
                taken += items[-1][1]
            self.bytes -= taken
            self._sizeless -= sum(not size for _, size in items)
            self._changed.notify_all()
        return [item for item, _ in items]


class Ingest:
    """ROUTER IO thread + writer thread. `call(fn)` runs fn(con) on the writer thread in one transaction."""

    def __init__(self, cfg: DaemonConfig, store: Store, exporter: Exporter, on_hello=None):
        self.cfg, self.store, self.exporter = cfg, store, exporter
        self.on_hello = on_hello or (lambda node, body: None)
        self.boot = uuid.uuid4().hex[:16]
        self.identities: dict[str, bytes] = {}      # node -> ROUTER identity of its latest connection
        self._received: dict[str, object] = {}      # frame type -> its frames_received child (IO thread)
        self._work = WorkQueue(cfg.max_queue_bytes, least_patience=1.5 * RECEIVE_TICK)
        self._ctx = zmq.Context.instance()
        self._outbox = f"inproc://causewatch-outbox-{id(self)}"
        self._seq = 0
        self._seq_lock = threading.Lock()
        self._running = threading.Event()
        self._auth: ThreadAuthenticator | None = None
        self.keys: AuthorizedKeys | None = None
        self._reload = threading.Event()
        self._log_limit = LogLimit()
        self._credit = CreditGrants(cfg.max_in_flight_bytes)
        self.endpoint: str | None = None
        self._threads: list[threading.Thread] = []
        # the writer's group commit (cfg.commit_delay): when it last committed, whose frames, and whether
        # frames of several agents are arriving
        self._committed_at, self._committed_nodes, self._several_agents = 0.0, set(), False

    # ---- lifecycle ----
    def start(self, http: str = "") -> str:
        """Bind, start both threads; return the bound endpoint (with the real port for tcp://*:0).
        `http`: the HTTP API's URL, named in every handshake (wire.HTTP_PROPERTY)."""
        raise_nofile_limit()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        if http:
            self._router.setsockopt(zmq.METADATA, f"{wire.HTTP_PROPERTY}:{http}".encode())
        # No ROUTER_HANDOVER: a routing id is never taken over by a later connection.
        # No ZMTP heartbeats from the daemon: libzmq 4.3.5 (and master) aborts the process when its
        # heartbeat timer fires on a connection whose input was stopped (pipe full) and then reset by
        # the peer (`!_io_error`, stream_engine_base.cpp:310, out_event from timer_event): a flood from a
        # peer that exits with its replies unread did that (tests/integration/test_hostile.py). Dead
        # peers are found by TCP keepalive instead; the agents still ping the daemon (a PONG is sent
        # on input, which a reset connection has stopped).
        self._router.setsockopt(zmq.TCP_KEEPALIVE, 1)
        self._router.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 10)
        self._router.setsockopt(zmq.TCP_KEEPALIVE_INTVL, 5)
        self._router.setsockopt(zmq.TCP_KEEPALIVE_CNT, 3)
        # Frames over the cap get a nack; only absurd ones (4x) make ZMQ drop the connection unread.
        self._router.setsockopt(zmq.MAXMSGSIZE, 4 * self.cfg.max_frame_bytes)
        self._secure()
        self._router.bind(self.cfg.bind)
        self.endpoint = self._router.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._pull = self._ctx.socket(zmq.PULL)
        self._pull.setsockopt(zmq.RCVHWM, 0)  # acks must never block the writer (it would stall the IO thread)
        self._pull.bind(self._outbox)
        self._running.set()
        for target, name in ((self._io_loop, "ingest-io"), (self._writer_loop, "ingest-writer")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self.endpoint

    def _secure(self) -> None:
        cfg = self.cfg
        if not cfg.keys:
            if not is_loopback(cfg.bind) and not cfg.insecure:
                raise ConfigError("bind", f"{cfg.bind} is not loopback and no CURVE keys are configured "
                                          "(give --keys DIR, or --insecure to accept unauthenticated agents)")
            log.warning("no CURVE keys configured: %s", "accepting anyone (insecure)" if cfg.insecure
                        else "binding loopback only")
            return
        keys = Path(cfg.keys)
        secret, allowed = keys / "server.key_secret", keys / "authorized"
        if not secret.is_file():
            raise ConfigError("keys", f"{secret} is missing (make it with: causewatch keys {keys} --name server)")
        if not allowed.is_dir():
            raise ConfigError("keys", f"{allowed}/ is missing: put the public keys of allowed agents there")
        try:
            public, private = zmq.auth.load_certificate(str(secret))
        except (OSError, ValueError) as e:
            raise ConfigError("keys", f"cannot read the daemon's secret key: {e}", str(secret)) from None
        if not private:
            raise ConfigError("keys", "holds no secret key (expected the pair made by causewatch keys)", str(secret))
        self.keys = AuthorizedKeys(allowed)
        count = self.keys.load(strict=True)
        self._auth = self.keys.authenticator(self._ctx)
        self._router.curve_secretkey, self._router.curve_publickey = private, public
        self._router.curve_server = True
        log.info("CURVE on: %d authorized agent keys in %s (reloaded on SIGHUP and on change)", count, allowed)

    def reload_keys(self) -> None:
        """Ask the IO thread to read authorized/ again (safe from a signal handler)."""
        self._reload.set()

    def _check_keys(self) -> None:
        if self.keys is None or not (self._reload.is_set() or self.keys.changed()):
            return
        self._reload.clear()
        log.info("authorized keys reloaded: %d agents allowed", self.keys.load(strict=False))

    def stop(self) -> None:
        """Stop taking frames, commit what is queued, send its acks, close."""
        if not self._running.is_set():
            return
        self._work.put(_STOP)
        self._threads[1].join()
        self._work.unbound()   # the IO thread may be waiting for room
        self._running.clear()
        self._threads[0].join()
        if self._auth:
            self._auth.stop()

    # ---- IO thread: the only user of the ROUTER socket ----
    def _io_loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._pull, zmq.POLLIN)
        checked = time.monotonic()
        while self._running.is_set():
            drained = True
            for sock, _ in poller.poll(100):
                if sock is self._router:
                    drained = self._receive_waiting() < RECEIVE_AT_ONCE
                else:
                    self._forward(_recv_parts(self._pull))
            if drained and self._several_agents:
                # the writer gathers for commit_delay: frames can wait a tick to be read several a wake
                # (a wake per frame had been most of this thread's CPU at 100 agents)
                time.sleep(RECEIVE_TICK)
            if time.monotonic() - checked > _KEYS_CHECK_SECONDS or self._reload.is_set():
                checked = time.monotonic()
                self._check_keys()
                self._credit.forget_idle()
                self.exporter.agents_connected.set(self._credit.connections)
                self.exporter.credit_share_bytes.set(self._credit.share)
        self._drain_outbox()
        self._router.close(linger=0)
        self._pull.close(linger=0)

    def _forward(self, parts: list[zmq.Frame]) -> None:
        """Send an outbox message: (routing id, frame) pairs, one pair or all the acks of a commit."""
        for i in range(0, len(parts), 2):
            try:
                self._router.send_multipart(parts[i:i + 2], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass   # the peer is gone: it resends what it has not seen acked

    def _drain_outbox(self) -> None:
        while self._pull.poll(0):
            self._forward(_recv_parts(self._pull))

    def _receive_waiting(self) -> int:
        """Every message waiting on the ROUTER, up to RECEIVE_AT_ONCE (then the acks get their turn): a
        poll per burst, not per message (docs/perf-log.md, "A poll per burst"). Returns how many."""
        received = 0
        try:
            for received in range(RECEIVE_AT_ONCE):
                self._receive()
        except zmq.Again:
            return received
        return RECEIVE_AT_ONCE

    def _receive(self) -> None:
        # zero-copy frames carry the connection's properties: the ZAP User-Id (the authorized key's name)
        # and whether the agent waits for credit
        parts = _recv_parts(self._router, zmq.NOBLOCK)
        user = parts[-1].get("User-Id") if self.keys is not None else None
        wants_credit = _has_property(parts[-1], wire.CREDIT_PROPERTY)
        identity, data = parts[0].bytes, parts[-1].bytes
        try:
            if identity[:1] != b"\x00":   # ids ZeroMQ assigns start with a zero byte; peers cannot choose those
                raise WireError("routing_id", "a routing id chosen by the peer is not accepted (do not set "
                                "ZMQ_ROUTING_ID)", "routing_id")
            if len(parts) != 2:
                raise WireError("frame", f"expected one message part, got {len(parts) - 1}", "decode")
            frame = wire.decode(data, self.cfg.max_frame_bytes)
            if user is not None and frame.node != user:
                e = WireError("node", f"{wire.show(frame.node)} is not the node this CURVE key was authorized "
                                      f"as ({user!r}): set the agent's node to {user!r}", "identity")
                e.boot, e.seq = frame.boot, frame.seq
                raise e
        except WireError as e:
            self._refuse(identity, e)
            return
        received = self._received.get(frame.type)
        if received is None:   # a child per frame type (wire.decode knows a handful): labels() is 2 us a call
            received = self._received[frame.type] = self.exporter.frames_received.labels(frame.type)
        received.inc()
        self.identities[frame.node] = identity
        for ident, granted in self._credit.note(identity, wants_credit):
            try:
                self._router.send_multipart([ident, self._daemon_frame("credit", {"bytes": granted})], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass   # the peer is gone: a new connection gets its own grant
        self._work.put((identity, frame), len(data))

    def _refuse(self, identity: bytes, e: WireError) -> None:
        self.exporter.frames_refused.labels(e.code).inc()
        field, reason = e.field[:wire.MAX_SHOWN], e.reason[:2 * wire.MAX_SHOWN]
        if self._log_limit.allow(e.code):
            log.warning("refused frame %s/%s from %s: %s: %s", e.boot or "?", e.seq or "?", identity.hex()[:16],
                        field, reason)
        body = {"field": field, "reason": reason, "code": e.code}
        if e.seq is not None:
            body.update(seq=e.seq, boot=e.boot)
        try:
            self._router.send_multipart([identity, self._daemon_frame("nack", body)], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass   # the peer is gone or not reading: it gets no nack, the daemon is not held up

    def _daemon_frame(self, kind: str, body: dict) -> bytes:
        with self._seq_lock:
            self._seq += 1
            return wire.encode(kind, "daemon", self.boot, self._seq, body)

    def send(self, node: str, kind: str, body: dict) -> bool:
        """Queue a daemon->agent frame to `node`'s latest connection; False if it never connected."""
        identity = self.identities.get(node)
        if identity is None:
            return False
        push = self._ctx.socket(zmq.PUSH)
        try:
            push.connect(self._outbox)
            push.send_multipart([identity, self._daemon_frame(kind, body)])
        finally:
            push.close(linger=1000)
        return True

    def backlog_bytes(self) -> int:
        """Bytes of received frames waiting for the writer."""
        return self._work.bytes

    # ---- writer thread: the only user of the DuckDB connection for writes ----
    def call(self, fn, timeout: float | None = None):
        """Run fn(con) on the writer thread in one transaction; return its result (or raise its error)."""
        future: Future = Future()
        self._work.put((fn, future))
        return future.result(timeout)

    def _writer_loop(self) -> None:
        push = self._ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDHWM, 0)
        push.connect(self._outbox)
        stopping = False
        while not stopping:
            if self._several_agents:
                self._work.gather(self._committed_at + self.cfg.commit_delay, self.cfg.batch_max_frames,
                                  self.cfg.batch_max_bytes)
            items = self._work.take(self.cfg.batch_max_frames, self.cfg.batch_max_bytes)
            stopping = any(i is _STOP for i in items)
            frames = [i for i in items if i is not _STOP and isinstance(i[1], wire.Frame)]
            calls = [i for i in items if i is not _STOP and isinstance(i[1], Future)]
            if frames:
                self._commit(frames, push)
            for fn, future in calls:
                self._run_call(fn, future)
        push.close(linger=5000)

    def _run_call(self, fn, future: Future) -> None:
        try:
            future.set_result(self.store.run(fn))
        except Exception as e:  # the job sees its own error; the writer goes on
            future.set_exception(e)

    def _commit(self, items: list[tuple[bytes, wire.Frame]], push) -> None:
        t0 = time.perf_counter()
        try:
            verdicts = self.store.commit_frames([f for _, f in items])
        except Exception as e:
            self.exporter.store_errors.inc()
            if len(items) > 1:  # find the frame that cannot be stored; store the rest
                log.error("batch of %d frames failed to commit (%s); committing one by one", len(items), e)
                for item in items:
                    self._commit([item], push)
                return
            ident, frame = items[0]
            log.error("frame %s/%s/%s cannot be stored: %s", frame.node, frame.boot, frame.seq, e)
            self.exporter.frames_refused.labels("store").inc()
            push.send_multipart([ident, self._daemon_frame(
                "nack", {"seq": frame.seq, "boot": frame.boot, "field": "frame", "code": "store",
                         "reason": f"store error: {str(e)[:wire.MAX_SHOWN]}"})])
            return
        self.exporter.commit_seconds.inc(time.perf_counter() - t0)
        self.exporter.commit_frames.observe(len(items))
        nodes = {f.node for _, f in items}
        # several agents share the writer when one commit holds frames of two, or the last two commits
        # (within the delay of each other) each held another agent's frames
        now = time.monotonic()
        self._several_agents = len(nodes) > 1 or (
            nodes != self._committed_nodes and now - self._committed_at < self.cfg.commit_delay)
        self._committed_at, self._committed_nodes = now, nodes
        identity_of = {id(f): ident for ident, f in items}
        for kind, n in collections.Counter(f.type for f in verdicts.stored).items():
            self.exporter.frames_stored.labels(kind).inc(n)
        self.exporter.values_stored.inc(sum(len(f.body["values"]) // 8 for f in verdicts.stored if f.type == "samples"))
        self.exporter.frames_duplicate.inc(len(verdicts.duplicate))
        self.exporter.nodes.observe(verdicts.stored)
        # all of a commit's acks in one message: one hand-over to the IO thread, not one per frame
        push.send_multipart([part for f in verdicts.stored + verdicts.duplicate for part in
                             (identity_of[id(f)], self._daemon_frame("ack", {"seq": f.seq, "boot": f.boot}))])
        for f in verdicts.stored:
            if f.type == "hello":
                self.on_hello(f.node, f.body)

"""The agent's sender: a DEALER socket that delivers spooled frames to the daemon.

Delivery promise: at-least-once send, exactly-once store. Every frame is spooled on disk before
`send` returns and stays there until the daemon acks it — which the daemon does only after the
commit (ack-after-commit) — and the daemon drops resends by (node, boot, seq). At most `window`
frames are in flight, and no more bytes than the daemon's last `credit` grant (credit-based flow
control; the handshake property wire.CREDIT_PROPERTY asks for grants; until the first one, and from a
daemon that sends none, one frame at a time). Nothing is sent between a disconnect and the next
handshake, and then every unacked frame is sent again, oldest first; also when the oldest frame has
waited the resend timeout: `resend_after` at least, else the acks' observed latency (TCP's RTO, RFC
6298: smoothed latency + 4 x its variation, doubled after each timeout, learnt anew on each
connection), so a slow daemon is not sent frames it still has queued. A nack deletes a frame only
when it says the frame itself is wrong; a nack with a code in wire.RETRY_CODES (store error,
identity) keeps it for the next resend. The frames an instrumented program spooled under
SPOOL/instrument are adopted and delivered too.
Reconnects back off up to 10 s (ZMQ reconnect_ivl_max) and ZMQ heartbeats detect a dead daemon.
A daemon that does not answer (no handshake for `answer_timeout` s from the start or since a
disconnect, while frames wait) is said once at WARNING, and once more when it answers again.
"""

from __future__ import annotations

import collections
import logging
import os
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import zmq
import zmq.auth

from causewatch import wire
from causewatch.agent.spool import Spool
from causewatch.config import AgentConfig
from causewatch.errors import ConfigError, WireError

log = logging.getLogger("causewatch.agent.sender")
_FAILED = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_AUTH | _FAILED
INSTRUMENT_SPOOL = "instrument"   # SPOOL/instrument: where instrumented programs spool when no agent listens
MAX_RESEND_SECONDS = 300.0        # the resend timeout's ceiling, however slow the acks


class Sender:
    def __init__(self, cfg: AgentConfig, on_command: Callable[[wire.Frame], None] | None = None,
                 resend_after: float = 10.0):
        self.cfg = cfg
        self.on_command = on_command or (lambda frame: None)
        self.resend_after = resend_after
        self.boot = uuid.uuid4().hex[:16]
        self.spool = Spool(cfg.spool, cfg.spool_max_bytes)
        adopted = self.spool.adopt(Path(cfg.spool).expanduser() / INSTRUMENT_SPOOL)
        # spool_dropped_frames (spool full), frames_nacked (every nack), frames_refused (nacks for frames
        # still unsettled, dropped or kept), frames_acked (stored, or already stored), frames_resent (after a
        # reconnect or timeout); plain counts: the agent exports nothing, and prometheus-client costs it 9 MB
        self.counts: collections.Counter = collections.Counter()
        self.last_refusal = ""         # why the daemon last refused a frame, for the agent's exit message
        self._lock = threading.Lock()
        self._seq = 0
        # (boot, seq) -> frame bytes, oldest first: frames of an earlier run of this agent come first.
        self._pending: collections.OrderedDict = collections.OrderedDict(
            ((b, s), d) for b, s, d in self.spool.pending())
        self._unsent = collections.deque(self._pending)
        self._in_flight: dict[tuple[str, int], float] = {}   # key -> when sent
        self._in_flight_bytes = 0
        self._credit = 0               # bytes the daemon granted; 0: one frame at a time
        self._sent_again: set = set()  # keys sent more than once: their acks say nothing of latency (Karn)
        self._latency: tuple[float, float] | None = None   # smoothed ack latency and its variation, seconds
        self._backoff = 1              # doubles at each timeout, back to 1 at a fresh latency sample
        self._acked = threading.Condition(self._lock)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stop = threading.Event()
        self._handshaken = False       # sender thread only: the connection is ready for frames
        self._failed_handshakes = 0
        self._refused_keys = 0         # CURVE refusals in a row: ZeroMQ does not retry those, this sender does
        self._retry_at: float | None = None
        self._silent_since: float | None = None   # sender thread: when the daemon was last lost; None: connected
        self._said_silent = False
        self.connected = threading.Event()
        self.auth_failed = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sender", daemon=True)
        if adopted:
            log.info("adopted %d frames an instrumented program spooled with no agent listening", adopted)
        if self._pending:
            log.info("spool holds %d unacked frames from an earlier run; they go first", len(self._pending))

    # ---- caller side (any thread) ----
    def start(self) -> "Sender":
        self._sock = self._socket()
        self._silent_since = time.monotonic()
        self._thread.start()
        return self

    def send(self, kind: str, body: dict) -> int:
        """Spool one frame and queue it; return its seq. Durable when this returns."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            data = wire.encode(kind, self.cfg.node, self.boot, seq, body)
            for key in self.spool.put(self.boot, seq, data):
                self._forget(key)
                self.counts["spool_dropped_frames"] += 1
                log.warning("spool full (%d bytes): dropped unsent frame %s/%d", self.cfg.spool_max_bytes, *key)
            self._pending[(self.boot, seq)] = data
            self._unsent.append((self.boot, seq))
        self._wake()
        return seq

    def flush(self, timeout: float) -> bool:
        """Wait until every spooled frame is acked (or refused); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._acked:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._acked.wait(min(left, 0.1))
        return True

    @property
    def unacked(self) -> int:
        with self._lock:
            return len(self._pending)

    def unacked_keys(self) -> list[tuple[str, int]]:
        """(boot, seq) of every frame not yet acked, oldest first."""
        with self._lock:
            return list(self._pending)

    def close(self) -> None:
        """Stop sending; what is not acked stays in the spool for the next run."""
        self._stop.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join()
        self.spool.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # a wake-up is already pending

    def _forget(self, key) -> None:
        """Drop a frame from the queues; a key is either unsent or in flight, never both."""
        data = self._pending.pop(key, None)
        self._sent_again.discard(key)
        if self._in_flight.pop(key, None) is not None:
            self._in_flight_bytes -= len(data)
        else:
            try:
                self._unsent.remove(key)
            except ValueError:
                pass

    # ---- sender thread: the only user of the socket ----
    def _socket(self) -> zmq.Socket:
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)        # queue nothing on a pipe that is not connected
        sock.setsockopt(zmq.RECONNECT_IVL, 100)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 10_000)
        sock.setsockopt(zmq.HEARTBEAT_IVL, 2000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 6000)
        sock.setsockopt(zmq.HEARTBEAT_TTL, 6000)
        sock.setsockopt(zmq.METADATA, f"{wire.CREDIT_PROPERTY}:1".encode())   # this agent honours credit grants
        # no ZMQ_ROUTING_ID: the daemon refuses peer-chosen ids and addresses its replies by the one it assigns
        if self.cfg.server_key or self.cfg.client_key:
            if not (self.cfg.server_key and self.cfg.client_key):
                raise ConfigError("server_key" if not self.cfg.server_key else "client_key",
                                  "CURVE needs both the daemon's public key and this agent's secret key")
            sock.curve_serverkey = zmq.auth.load_certificate(self.cfg.server_key)[0]
            sock.curve_publickey, sock.curve_secretkey = zmq.auth.load_certificate(self.cfg.client_key)
        self._monitor = sock.get_monitor_socket(_EVENTS)
        sock.connect(self.cfg.daemon)
        return sock

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        while not self._stop.is_set():
            for sock, _ in poller.poll(self._poll_timeout()):
                if sock is self._sock:
                    self._receive()
                elif sock is self._monitor:
                    self._on_event(_monitor_event(self._monitor.recv_multipart()))
                else:
                    os.read(self._wake_r, 4096)
            if self._retry_at is not None and time.monotonic() >= self._retry_at:
                self._retry_at = None
                self._reconnect()
            self._warn_if_silent()
            self._resend_if_stale()
            self._send_window()
        self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)

    def _reconnect(self) -> None:
        try:
            self._sock.disconnect(self.cfg.daemon)
        except zmq.ZMQError:
            pass   # ZeroMQ may have dropped the endpoint already
        self._sock.connect(self.cfg.daemon)

    @property
    def resend_timeout(self) -> float:
        """Seconds an in-flight frame waits for its ack before it is sent again (RFC 6298's RTO)."""
        rto = self.resend_after
        if self._latency is not None:
            rto = max(rto, self._latency[0] + 4 * self._latency[1])
        return min(rto * self._backoff, max(self.resend_after, MAX_RESEND_SECONDS))

    def _observe(self, key, now: float) -> None:
        """An ack of a frame sent once: fold its latency into the smoothed estimate (RFC 6298, 2.2-2.3)."""
        sent = self._in_flight.get(key)
        if sent is None or key in self._sent_again:
            return
        sample = now - sent
        if self._latency is None:
            self._latency = (sample, sample / 2)
        else:
            smooth, var = self._latency
            self._latency = (0.875 * smooth + 0.125 * sample, 0.75 * var + 0.25 * abs(smooth - sample))
        self._backoff = 1

    def _resend_due(self) -> float | None:
        """Monotonic time at which the oldest in-flight frame is due again; None when nothing is in flight."""
        with self._lock:
            oldest = min(self._in_flight.values(), default=None)
        return None if oldest is None else oldest + self.resend_timeout

    def _poll_timeout(self) -> int | None:
        """Sleep until there is work (wake pipe, ack, monitor event) or the oldest frame is due again."""
        due = min((t for t in (self._resend_due(), self._retry_at, self._silence_due()) if t is not None),
                  default=None)
        return None if due is None else max(0, int((due - time.monotonic()) * 1000)) + 1

    def _on_event(self, event: dict) -> None:
        if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            # a new connection (often a restarted daemon) starts from resend_after, as TCP starts each
            # connection from its initial RTO: a latency learnt before, or a backoff, would stall it
            self._latency, self._backoff = None, 1
            self._handshaken = True
            self._answered()
            self._failed_handshakes = self._refused_keys = 0
            self.connected.set()
            self.auth_failed.clear()
        elif event["event"] == zmq.EVENT_DISCONNECTED:
            # Everything in flight went out on the dead connection. Nothing more is sent until the next
            # handshake is read: frames written after the disconnect would be lost with the connection,
            # or reach the new daemon out of order.
            self._handshaken = False
            self.connected.clear()
            # the silence starts at the first disconnect: a port that speaks no ZMTP fails the handshake and
            # disconnects at every retry, which must not restart the clock
            if self._silent_since is None:
                self._silent_since = time.monotonic()
            self._credit = 0   # the next connection's daemon grants its own
            self._requeue("disconnected")
        elif event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.auth_failed.set()
            # ZeroMQ never reconnects after the daemon's ZAP refusal; keys may be authorized later (the
            # daemon reloads them), so connect again with a backoff of 1 s doubling up to 32 s
            self._retry_at = time.monotonic() + 2 ** min(self._refused_keys, 5)
            self._refused_keys += 1
            if self._refused_keys > 1:
                return
            log.error("daemon %s refused this agent's CURVE key. Likely causes: on the daemon, this agent's "
                      "public key is not in its authorized/ folder (causewatch keys DIR --authorize %s.key; it "
                      "reloads on SIGHUP) or that file is malformed; here, client_key %s is not the pair of "
                      "the authorized public key", self.cfg.daemon, self.cfg.node, self.cfg.client_key)
        elif event["event"] & _FAILED:
            self._failed_handshakes += 1
            if not self.cfg.server_key:   # no keys: a daemon that died mid-handshake; ZeroMQ reconnects
                log.info("handshake with daemon %s interrupted (%s); reconnecting", self.cfg.daemon, event.get("value"))
            elif self._failed_handshakes == 1:   # it repeats at every reconnect: say it once per outage
                log.error("handshake with daemon %s failed (%s). Likely causes: here, server_key %s is not the "
                          "daemon's public server.key, or CURVE is on at one end only; on the daemon, --keys "
                          "names another key pair", self.cfg.daemon, event.get("value"), self.cfg.server_key)

    def _silence_due(self) -> float | None:
        """When to say that the daemon does not answer; None when connected, said already, refused by
        ZAP (an answer, logged as such) or when no frame waits (send() wakes the loop for the next)."""
        if self._silent_since is None or self._said_silent or self.auth_failed.is_set() or not self.unacked:
            return None
        return self._silent_since + self.cfg.answer_timeout

    def _warn_if_silent(self) -> None:
        due = self._silence_due()
        if due is None or time.monotonic() < due:
            return
        self._said_silent = True
        log.warning("causewatch daemon %s does not answer (no handshake for %.1f s); still trying, %d frames "
                    "wait in the spool %s", self.cfg.daemon, time.monotonic() - self._silent_since, self.unacked,
                    self.spool.path.parent)

    def _answered(self) -> None:
        # WARNING like the silence it ends, so that whoever saw that line sees this one too
        if self._said_silent:
            log.warning("causewatch daemon %s answers again after %.1f s; sending the %d frames that waited in "
                        "the spool", self.cfg.daemon, time.monotonic() - self._silent_since, self.unacked)
        self._silent_since, self._said_silent = None, False

    def _requeue(self, why: str) -> None:
        """Send every unacked frame again, oldest first (the daemon stores each once)."""
        with self._lock:
            if self._in_flight:
                self.counts["frames_resent"] += len(self._in_flight)
                log.info("%s: resending %d unacked frames", why, len(self._in_flight))
            self._sent_again.update(self._in_flight)
            self._in_flight.clear()
            self._in_flight_bytes = 0
            self._unsent = collections.deque(self._pending)

    def _resend_if_stale(self) -> None:
        due = self._resend_due()
        if due is not None and time.monotonic() > due:
            timeout = self.resend_timeout
            self._backoff *= 2
            self._requeue(f"no ack for {timeout:.1f} s")

    def _send_window(self) -> None:
        while self._handshaken:
            with self._lock:
                if len(self._in_flight) >= self.cfg.window or not self._unsent:
                    return
                key = self._unsent[0]
                data = self._pending[key]
                if self._in_flight and self._in_flight_bytes + len(data) > self._credit:
                    return   # beyond the daemon's grant: the next ack or grant sends it
            try:
                self._sock.send(data, zmq.NOBLOCK)
            except zmq.Again:
                return  # not connected: IMMEDIATE keeps it here until the handshake
            with self._lock:
                if self._unsent and self._unsent[0] == key:
                    self._unsent.popleft()
                    self._in_flight[key] = time.monotonic()
                    self._in_flight_bytes += len(data)

    def _receive(self) -> None:
        data = self._sock.recv()
        try:
            frame = wire.decode(data, types=wire.DAEMON_TYPES)
        except WireError as e:
            log.error("unreadable frame from daemon: %s", e)
            return
        if frame.type == "ack":
            if self._settle((frame.body["boot"], frame.body["seq"]), observe=True):
                self.counts["frames_acked"] += 1
        elif frame.type == "credit":
            self._credit = frame.body["bytes"]
        elif frame.type == "nack":
            self._on_nack(frame.body)
        else:
            self.on_command(frame)

    def _on_nack(self, body: dict) -> None:
        self.counts["frames_nacked"] += 1
        keep = body.get("code") in wire.RETRY_CODES
        log.error("daemon refused frame %s/%s: %s: %s (%s)", body.get("boot", "?"), body.get("seq", "?"),
                  body["field"], body["reason"], "kept in the spool, sent again later" if keep else "dropped")
        key = (body.get("boot"), body.get("seq"))
        with self._lock:
            if key not in self._pending:
                return   # not ours, or settled already
        self.counts["frames_refused"] += 1
        self.last_refusal = f"{body['field']}: {body['reason']}"
        if not keep:
            self._settle(key)
        # else nothing is wrong with the frame itself: the resend timer sends it again

    def _settle(self, key, observe: bool = False) -> bool:
        with self._acked:
            if key not in self._pending:
                return False
            if observe:
                self._observe(key, time.monotonic())
            self._forget(key)
            self.spool.remove(*key)
            self._acked.notify_all()
            return True


def _monitor_event(frames: list[bytes]) -> dict:
    """One zmq_socket_monitor event as {event, value, endpoint}: the 16-bit event and 32-bit value of the
    first frame (zmq.utils.monitor does the same, but imports asyncio and ssl: 7 MB of the agent's RSS)."""
    event, value = struct.unpack("=hi", frames[0])
    return {"event": event, "value": value, "endpoint": frames[1]}

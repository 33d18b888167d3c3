"""What answers at a `--daemon` address that is no HTTP server. A ZeroMQ socket speaks first (ZMTP's
greeting, 0xFF ... 0x7F, sent on connect) where an HTTP server waits for the request, and http.client
then waits for a status line that never comes: so the first bytes of each answer are looked at before
they are read as HTTP (`opener`). A daemon's agents' port, its ROUTER, names its HTTP API in the
handshake (wire.HTTP_PROPERTY): `explain` asks it, in a ZMTP handshake of its own (RFC 23, NULL
mechanism), to say where the API is.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.parse
import urllib.request

from causewatch import wire

ZMTP_FIRST = 0xFF    # a ZMTP greeting's first byte; no HTTP status line starts with it
HANDSHAKE_SECONDS = 2.0
WILDCARD = ("0.0.0.0", "::")   # an API bound on every address: reached at the host the user gave
# ours: signature (0xFF, 8 bytes of padding, 0x7F), version 3.0, mechanism NULL, as-server 0, filler
GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + bytes(31)


class NotHttp(http.client.HTTPException):
    """An answer whose first bytes (`head`) cannot start an HTTP response."""

    def __init__(self, head: bytes):
        super().__init__(f"not an HTTP answer: {head[:16]!r}")
        self.head = head


class _Response(http.client.HTTPResponse):
    def begin(self):
        head = self.fp.peek(5)[:5]   # whatever came first, without consuming it
        if head and not b"HTTP/".startswith(head):
            raise NotHttp(head)
        super().begin()


class _Connection(http.client.HTTPConnection):
    response_class = _Response


class _Handler(urllib.request.HTTPHandler):
    def http_open(self, req):
        return self.do_open(_Connection, req)


def opener(context=None) -> urllib.request.OpenerDirector:
    """urllib's opener with `context` for https:// (None: Python's default), as urlopen(context=) makes
    it, but an http:// answer that is not HTTP raises NotHttp at its first bytes."""
    return urllib.request.build_opener(_Handler, urllib.request.HTTPSHandler(context=context))


def explain(url: str, head: bytes, default_http: str) -> str:
    """The one line for an address that answered `head`, not HTTP: a ZeroMQ port, and where the
    daemon's HTTP API is when its handshake names it (else its default, `default_http`)."""
    parts = urllib.parse.urlsplit(url)
    if head[:1] != bytes([ZMTP_FIRST]):
        return (f"{parts.netloc} answers, but not in HTTP (it sent {head!r}); give the daemon's HTTP API, "
                f"its --http address (default {default_http})")
    api = zmtp_property(parts.hostname, parts.port or 80, wire.HTTP_PROPERTY)
    if not api:
        return (f"{parts.netloc} is a ZeroMQ port (a daemon's agents' port, its --bind?), not its HTTP API; "
                f"the HTTP API is on the daemon's --http address (default {default_http})")
    named = urllib.parse.urlsplit(api)
    if named.hostname in WILDCARD:
        host = parts.netloc.rpartition(":")[0] if parts.port else parts.netloc
        api = f"{named.scheme}://{host}:{named.port}"
    return f"{parts.netloc} is the agents' ZeroMQ port; the HTTP API is on {api} (give that as --daemon)"


def zmtp_property(host: str, port: int, name: str, seconds: float = HANDSHAKE_SECONDS) -> str | None:
    """The property `name` of the READY command that the ZeroMQ peer at host:port sends in a NULL
    handshake; None when it names none, asks for another mechanism (CURVE) or does not finish in time."""
    deadline = time.monotonic() + seconds
    try:
        with socket.create_connection((host, port), timeout=seconds) as s:
            s.sendall(GREETING)
            theirs = _exactly(s, 64, deadline)
            if theirs[10] < 3 or theirs[12:32].rstrip(b"\0") != b"NULL":
                return None
            s.sendall(_ready({"Socket-Type": "DEALER"}))
            command, properties = _command(s, deadline)
    except (OSError, ValueError, IndexError):
        return None
    return properties.get(name.lower()) if command == "READY" else None


def _ready(properties: dict[str, str]) -> bytes:
    """A READY command: flags 0x04 (a short command), size, name, then each property's name and value."""
    body = b"\x05READY" + b"".join(bytes([len(k)]) + k.encode() + len(v).to_bytes(4, "big") + v.encode()
                                   for k, v in properties.items())
    return bytes([0x04, len(body)]) + body


def _command(s: socket.socket, deadline: float) -> tuple[str, dict[str, str]]:
    """The peer's next command: its name, and its properties by lower-case name (ZMTP's are
    case-insensitive)."""
    flags = _exactly(s, 1, deadline)[0]
    if not flags & 0x04:
        raise ValueError("a message where the handshake's command belongs")
    body = _exactly(s, int.from_bytes(_exactly(s, 8 if flags & 0x02 else 1, deadline), "big"), deadline)
    end = 1 + body[0]
    name, properties = body[1:end].decode(errors="replace"), {}
    while end < len(body):
        key_end = end + 1 + body[end]
        size = int.from_bytes(body[key_end:key_end + 4], "big")
        key, value = body[end + 1:key_end], body[key_end + 4:key_end + 4 + size]
        properties[key.decode(errors="replace").lower()] = value.decode(errors="replace")
        end = key_end + 4 + size
    return name, properties


def _exactly(s: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ValueError("the peer closed the connection in the handshake")
        data += chunk
    return data

"""The daemon's HTTP side, one WSGI application on the standard library's threading server: /metrics in
the format asked for (text or OpenMetrics, as client_python negotiates it), gzipped when accepted,
filtered by `name[]`; /api/ requests are answered by the API worker (routes.answer in a child process:
the daemon itself never loads pandas or the analytics).

POSTs that write are taken from loopback or with the configured bearer token (a POST that only reads,
as a scheduler extender's, or a form asking a Prometheus read as Grafana posts one, from anywhere); that
check, the body's size limit
and /metrics stay in the daemon, so a scrape never waits for the worker.

A web configuration (webconfig.py) adds HTTPS, its handshake on the request's own thread, and a user and
password asked of every request, /metrics included (the api_token, which peers send, counts as well).
"""

from __future__ import annotations

import gzip
import hmac
import ipaddress
import json
import logging
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import gzip_accepted

from causewatch.daemon import verbs
from causewatch.daemon.cluster import PEER
from causewatch.daemon.webconfig import WebConfig
from causewatch.daemon.worker import WorkerError

log = logging.getLogger("causewatch.daemon.http")
MAX_BODY = 16 * 1024 * 1024
HANDSHAKE_SECONDS = 10.0   # a client silent before its TLS handshake is done holds a thread no longer
NOT_TLS = (b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n\r\n"
           b"Client sent an HTTP request to an HTTPS server.\n")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _json(code: int, obj) -> tuple[int, bytes, str]:
    return code, json.dumps(obj).encode(), "application/json"


class Api:
    """The WSGI application. `answer(method, path, params, body, accept)` -> (status, bytes, content type) is
    routes.answer where the daemon runs it (its API worker); `exporter` renders /metrics.

    /metrics is not client_python's make_wsgi_app, whose negotiation and gzip rule it shares: that app
    renders every series on each scrape, and the jobs' snapshots are rendered once per publish."""

    def __init__(self, exporter, answer: Callable, token: str = "", cluster=None, web: WebConfig | None = None):
        """`cluster` (daemon/cluster.py, with peers configured): /api/ answers for every shard; `web`: the
        users asked for and the headers added (webconfig.py)."""
        self.exporter, self.answer, self.token, self.cluster = exporter, answer, token, cluster
        self.web = web or WebConfig()

    def __call__(self, environ: dict, start_response: Callable) -> list[bytes]:
        web = self.web   # one configuration for the whole request, though a reload swaps it meanwhile
        if web.headers:
            start_response = _adding(start_response, web.headers)
        if web.auth is not None and not self._authenticated(web, environ.get("HTTP_AUTHORIZATION", "")):
            _, data, ctype = _json(401, {"error": "this daemon asks for a user and password (HTTP basic "
                                                  "authentication: basic_auth_users of its web configuration)"})
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="causewatch"'),
                                                ("Content-Type", ctype), ("Content-Length", str(len(data)))])
            return [data]
        if environ.get("PATH_INFO") == "/metrics":
            return self._metrics(environ, start_response)
        try:
            code, data, ctype, *extra = self._api(environ)
        except WorkerError as e:   # the API worker died or the daemon is stopping
            log.warning("%s %s: %s", environ["REQUEST_METHOD"], environ.get("PATH_INFO"), e)
            code, data, ctype, *extra = _json(503, {"error": str(e)})
        start_response(f"{code} {HTTPStatus(code).phrase}", [("Content-Type", ctype),
                                                              ("Content-Length", str(len(data))),
                                                              *(extra[0] if extra else [])])
        return [data]

    def _metrics(self, environ: dict, start_response: Callable) -> list[bytes]:
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        names = urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
        body, ctype = self.exporter.render(environ.get("HTTP_ACCEPT"), names)
        headers = [("Content-Type", ctype)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING")):
            body = gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers + [("Content-Length", str(len(body)))])
        return [body]

    def _api(self, environ: dict) -> tuple[int, bytes, str]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/")
        params = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        accept = environ.get("HTTP_ACCEPT", "")
        peer = environ.get("HTTP_" + PEER.upper().replace("-", "_"))
        if peer is not None:
            refused = self._peer_refused(peer, environ)
            if refused:
                return _json(403, {"error": refused})
        # a peer's request is answered from this shard alone; any other, with peers, for the cluster
        answer = self.cluster.answer if self.cluster is not None and peer is None else self.answer
        if method == "GET":
            return answer(method, path, params, b"", accept)
        if method != "POST":
            return _json(405, {"error": f"{method}: the API takes GET and POST"})
        verb = verbs.find(method, path)[0]
        form = _form_verb(path, environ.get("CONTENT_TYPE", ""))
        if (form is None and (verb is None or verb.writes) and not _loopback(environ.get("REMOTE_ADDR", ""))
                and not self._has_token(environ.get("HTTP_AUTHORIZATION", ""))):
            return _json(403, {"error": "POST is taken from loopback or with the api_token of the daemon's config "
                                        "(Authorization: Bearer TOKEN)"})
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _json(400, {"error": f"Content-Length: not a number ({environ['CONTENT_LENGTH']!r})"})
        if length > MAX_BODY:
            return _json(413, {"error": f"body over {MAX_BODY} bytes"})
        body = environ["wsgi.input"].read(length)
        if form is not None:   # a read asked by form, as Grafana asks Prometheus: the same as its GET
            for name, values in urllib.parse.parse_qs(body.decode("latin-1")).items():
                params[name] = params.get(name, []) + values
            return answer("GET", path, params, b"", accept)
        return answer(method, path, params, body, accept)

    def _peer_refused(self, peer: str, environ: dict) -> str | None:
        """Why a request marked as a peer's is refused: the peer must be one this daemon was told about,
        with the api_token when one is set (else from loopback)."""
        known = sorted(self.cluster.peers) if self.cluster is not None else []
        if peer not in known:
            return f"{PEER} {peer!r}: not a peer of this daemon (its peers: {', '.join(known) or 'none'})"
        if self.token:
            if not self._has_token(environ.get("HTTP_AUTHORIZATION", "")):
                return f"peer {peer!r}: give this daemon's api_token (Authorization: Bearer TOKEN)"
        elif not _loopback(environ.get("REMOTE_ADDR", "")):
            return f"peer {peer!r}: from another host a peer needs the api_token (none is set here)"
        return None

    def _has_token(self, authorization: str) -> bool:
        return bool(self.token) and hmac.compare_digest(authorization.encode(), f"Bearer {self.token}".encode())

    def _authenticated(self, web: WebConfig, authorization: str) -> bool:
        """A configured user's password, or the api_token (a peer's request carries it, not a user's)."""
        return web.auth.allows(authorization) or self._has_token(authorization)


def _form_verb(path: str, content_type: str):
    """The GET verb a POSTed form asks (one that takes forms: Prometheus' API), or None."""
    if content_type.partition(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        return None
    verb = verbs.find("GET", path)[0]
    return verb if verb is not None and verb.forms else None


def _adding(start_response: Callable, headers: tuple) -> Callable:
    def start(status, response_headers, *exc_info):
        return start_response(status, [*response_headers, *headers], *exc_info)
    return start


class _Server(ThreadingMixIn, WSGIServer):
    """With `tls` a context, each connection's TLS handshake runs on its request's thread (in accept's,
    one silent client would hold up all)."""
    daemon_threads = True
    tls: ssl.SSLContext | None = None
    allowed_sans: frozenset = frozenset()

    def finish_request(self, request, client_address) -> None:
        if self.tls is None:
            return super().finish_request(request, client_address)
        tls = self._handshake(request, client_address)
        if tls is not None:
            try:
                super().finish_request(tls, client_address)
            finally:
                self.shutdown_request(tls)

    def _handshake(self, sock: socket.socket, client_address) -> ssl.SSLSocket | None:
        """The connection over TLS, or None (refused, said why: a plain HTTP request gets a 400, as Go's
        servers answer it)."""
        sock.settimeout(HANDSHAKE_SECONDS)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
            if first != b"\x16":   # not a TLS handshake record: a plain HTTP request, or gone
                if first:
                    sock.sendall(NOT_TLS)
                return None
            tls = self.tls.wrap_socket(sock, server_side=True)
        except OSError as e:   # ssl.SSLError among them: no common version or cipher, an unknown CA, …
            log.info("TLS handshake with %s:%s failed: %s", *client_address[:2], e)
            return None
        if self.allowed_sans and not self.allowed_sans & {v for _, v in tls.getpeercert().get("subjectAltName", ())}:
            log.info("client certificate of %s:%s names none of client_allowed_sans", *client_address[:2])
            self.shutdown_request(tls)
            return None
        tls.settimeout(None)
        return tls


class _Handler(WSGIRequestHandler):
    def log_message(self, fmt, *args):
        log.debug(fmt, *args)


class HttpApi:
    """`app` served on `address` (HOST:PORT; port 0 picks one) from a thread of its own, over TLS when
    `web` says so."""

    def __init__(self, address: str, app: Callable, web: WebConfig | None = None):
        host, _, port = address.rpartition(":")
        self.server = make_server(host or "127.0.0.1", int(port), app, server_class=_Server, handler_class=_Handler)
        self.address = f"{self.server.server_address[0]}:{self.server.server_address[1]}"
        self.use(web or WebConfig())
        if (web is None or web.auth is None) and not _loopback(self.server.server_address[0]):
            log.warning("http %s: /metrics and /api/ (node names, command lines, models) are open to whoever reaches "
                        "this port; give a web configuration with basic_auth_users (--web-config-file)", self.address)
        self._thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    @property
    def url(self) -> str:
        """Where the API is: an https:// URL while it serves TLS."""
        return f"{'https' if self.server.tls else 'http'}://{self.address}"

    def use(self, web: WebConfig) -> None:
        """Serve new connections with `web`'s TLS (a renewed certificate, say)."""
        self.server.tls, self.server.allowed_sans = web.tls, web.allowed_sans

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

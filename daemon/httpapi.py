"""The daemon's HTTP side: Prometheus /metrics from the exporter, and the /api/ routes, which the API
worker answers (daemon/routes.py, a child process: the daemon itself never loads pandas or the analytics).

POSTs are taken from loopback or with the configured bearer token; that check, the body's size limit
and /metrics stay here, so a scrape never waits for the worker.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from causewatch.daemon.worker import WorkerError

log = logging.getLogger("causewatch.daemon.http")
MAX_BODY = 16 * 1024 * 1024


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpApi:
    """answer(method, path, params, body) -> (status, bytes, content type): routes.answer, run where the
    daemon chooses (its API worker)."""

    def __init__(self, address: str, exporter, answer: Callable, token: str = ""):
        host, _, port = address.rpartition(":")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/metrics":
                    return self._reply(200, exporter.exposition(), "text/plain; version=0.0.4")
                self._answer(url, b"")

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                given = self.headers.get("Authorization", "")
                if not _loopback(self.client_address[0]) and not (
                        token and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())):
                    return self._json(403, {"error": "POST is taken from loopback or with the api_token of the "
                                                     "daemon's config (Authorization: Bearer TOKEN)"})
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    return self._json(413, {"error": f"body over {MAX_BODY} bytes"})
                self._answer(url, self.rfile.read(length))

            def _answer(self, url, raw: bytes):
                try:
                    self._reply(*answer(self.command, url.path, urllib.parse.parse_qs(url.query), raw))
                except WorkerError as e:   # the API worker died or the daemon is stopping
                    log.warning("%s %s: %s", self.command, self.path, e)
                    self._json(503, {"error": str(e)})

            def _json(self, code, obj):
                self._reply(code, json.dumps(obj).encode(), "application/json")

            def _reply(self, code, data: bytes, ctype: str):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt, *args):
                log.debug(fmt, *args)

        self.server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
        self.address = f"{self.server.server_address[0]}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

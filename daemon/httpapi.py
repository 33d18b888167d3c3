"""The daemon's HTTP side: Prometheus /metrics from the latest-state cache and JSON under /api/.

Each /api route is a function (query params, read cursor) -> JSON-able; an InputError becomes a
400 with its message. Readers use their own DuckDB cursor, never the writer's connection.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from causewatch.analytics.fuzzy import perfql
from causewatch.analytics.fuzzy.bottlenecks import find_bottlenecks, summarise_bottlenecks
from causewatch.analytics.fuzzy.summaries import records
from causewatch.daemon import tables
from causewatch.errors import CausewatchError, InputError
from causewatch.probe.rank import rank_nodes

log = logging.getLogger("causewatch.daemon.http")

def stats(params: dict, con) -> dict:
    """Row counts per table and per sample metric."""
    return {"tables": tables.table_counts(con), "samples_per_metric": tables.samples_per_metric(con)}


def nodes(params: dict, con) -> list[dict]:
    return tables.nodes(con)


def _number(params: dict, key: str, kind=float, default=None):
    try:
        return default if key not in params else kind(params[key])
    except ValueError:
        raise InputError(f"{key}: expected a {kind.__name__}, got {params[key]!r}") from None


def query(params: dict, con) -> list[dict]:
    """PERFQL over the live store: /api/query?q=(cpi is high)&min_degree=0.3&top=10&last=3600."""
    if not params.get("q"):
        raise InputError("q: give a PERFQL statement, e.g. /api/query?q=(cpi is high)")
    last = _number(params, "last")
    try:
        found = tables.perfql_matches(con, perfql.Query(params["q"]), None if last is None else time.time() - last,
                                      min_degree=_number(params, "min_degree", default=0.0),
                                      top=_number(params, "top", int))
    except ValueError as e:
        raise InputError(str(e)) from None
    return records(found)


def bottlenecks(params: dict, con) -> list[dict]:
    """Fuzzy bottleneck search over the live store: /api/bottlenecks?top=20&last=600."""
    last = _number(params, "last")
    found = find_bottlenecks(tables.region_summaries(con, None if last is None else time.time() - last))
    return records(summarise_bottlenecks(found).head(_number(params, "top", int)))


def rank(params: dict, con) -> dict:
    """Nodes ranked by predicted task time for an app: /api/rank?app=lu."""
    app = params.get("app")
    if not app:
        raise InputError("GET /api/rank needs ?app=NAME")
    return {"app": app, "nodes": rank_nodes(app, tables.latest_probes(con, app))}


ROUTES: dict[str, Callable] = {"/api/stats": stats, "/api/nodes": nodes, "/api/query": query,
                               "/api/bottlenecks": bottlenecks, "/api/rank": rank}


class HttpApi:
    def __init__(self, address: str, metrics, cursor: Callable, routes: dict[str, Callable] | None = None):
        host, _, port = address.rpartition(":")
        self.routes = dict(ROUTES, **(routes or {}))
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/metrics":
                    return self._reply(200, metrics.exposition(), "text/plain; version=0.0.4")
                route = api.routes.get(url.path)
                if route is None:
                    return self._json(404, {"error": f"no route {url.path} (known: /metrics, "
                                                     f"{', '.join(sorted(api.routes))})"})
                params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
                try:
                    self._json(200, route(params, cursor()))
                except CausewatchError as e:
                    self._json(400, {"error": str(e)})
                except Exception as e:
                    log.exception("GET %s failed", self.path)
                    self._json(500, {"error": f"{type(e).__name__}: {e}"})

            def _json(self, code, obj):
                self._reply(code, json.dumps(obj, default=str).encode(), "application/json")

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

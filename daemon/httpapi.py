"""The daemon's HTTP side: Prometheus /metrics from the exporter, JSON and Arrow frames under /api/.

A GET route is a function (query params, read cursor) -> JSON-able, text, or a DataFrame (sent as an
Arrow IPC stream, so a CLI reading a live daemon gets the frame a stopped store gives); a POST route
also gets the request's JSON body and the writer. POSTs are taken from loopback or with the
configured bearer token. An InputError is a 400 naming the bad thing.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pyarrow as pa

from causewatch.analytics.causal.drawing import model_svg
from causewatch.analytics.causal.model import CausalModel
from causewatch.analytics.fuzzy import perfql
from causewatch.analytics.fuzzy.bottlenecks import find_bottlenecks, summarise_bottlenecks
from causewatch.analytics.fuzzy.summaries import records
from causewatch.daemon import store, tables
from causewatch.errors import CausewatchError, InputError
from causewatch.probe.rank import RATIO, rank_nodes
from causewatch.probe.registry import kit_row

log = logging.getLogger("causewatch.daemon.http")
ARROW = "application/vnd.apache.arrow.stream"
MAX_BODY = 16 * 1024 * 1024


class Text(str):
    """A route's plain-text answer, with its content type."""

    def __new__(cls, text: str, ctype: str = "text/plain"):
        obj = super().__new__(cls, text)
        obj.ctype = ctype
        return obj


def _one(params: dict, key: str, kind=str, default=None):
    """The last value of `key`, converted by `kind`; a value that does not convert is a 400."""
    if key not in params:
        return default
    try:
        return kind(params[key][-1])
    except ValueError:
        raise InputError(f"{key}: expected a {kind.__name__}, got {params[key][-1]!r}") from None


def _since(params: dict) -> float | None:
    last = _one(params, "last", float)
    return None if last is None else time.time() - last


# ---- GET routes ----------------------------------------------------------------------------------

def stats(params: dict, con) -> dict:
    """Row counts per table and per sample metric."""
    return {"tables": tables.table_counts(con), "samples_per_metric": tables.samples_per_metric(con)}


def nodes(params: dict, con) -> list[dict]:
    return tables.nodes(con)


def query(params: dict, con) -> list[dict]:
    """PERFQL over the live store: /api/query?q=(cpi is high)&min_degree=0.3&top=10&last=3600."""
    text = _one(params, "q")
    if not text:
        raise InputError("q: give a PERFQL statement, e.g. /api/query?q=(cpi is high)")
    try:
        found = tables.perfql_matches(con, perfql.Query(text), _since(params), nodes=params.get("node"),
                                      min_degree=_one(params, "min_degree", float, 0.0), top=_one(params, "top", int))
    except ValueError as e:
        raise InputError(str(e)) from None
    return records(found)


def bottlenecks(params: dict, con) -> list[dict]:
    """Fuzzy bottleneck search over the live store: /api/bottlenecks?top=20&last=600."""
    found = find_bottlenecks(tables.region_summaries(con, _since(params), nodes=params.get("node")))
    return records(summarise_bottlenecks(found).head(_one(params, "top", int)))


def rank(params: dict, con) -> dict:
    """Nodes ranked by predicted task time for an app, with what `ratio` compares: /api/rank?app=lu."""
    app = _one(params, "app")
    if not app:
        raise InputError("GET /api/rank needs ?app=NAME")
    nodes = rank_nodes(app, tables.latest_probes(con, app), tables.registered_kits(con), time.time())
    return {"app": app, "ratio": RATIO, "nodes": nodes}


def regions(params: dict, con) -> pd.DataFrame:
    """Region summaries (Arrow): /api/regions?last=600&node=n1&metric=cpi (node, metric repeatable)."""
    return tables.region_summaries(con, _since(params), nodes=params.get("node"), metrics=params.get("metric"))


def tasks(params: dict, con) -> pd.DataFrame:
    """Stored tasks (Arrow) with positional param/counter columns; their keys in the schema metadata."""
    frame, pkeys, ckeys = tables.task_frame(con, _one(params, "app"))
    frame.attrs.update(params=pkeys, counters=ckeys)
    return frame


def samples(params: dict, con) -> pd.DataFrame:
    """Stored samples, long (Arrow): /api/samples?metric=cpu_seconds&scope=node."""
    return tables.samples_frame(con, params.get("metric"), _one(params, "scope"))


def bbv_targets(params: dict, con) -> pd.DataFrame:
    return tables.bbv_targets(con)


def bbv(params: dict, con) -> pd.DataFrame:
    """One target's vectors of one kind, long (Arrow): /api/bbv?target=app:x&kind=python."""
    target, kind = _one(params, "target"), _one(params, "kind")
    if not target or not kind:
        raise InputError("GET /api/bbv needs ?target=NAME&kind=native|python")
    return tables.bbv_rows(con, target, kind)


def models(params: dict, con) -> list[dict]:
    """Model versions, newest first: /api/models?scope=app:lu."""
    return tables.models(con, _one(params, "scope"))


def model(params: dict, con):
    """A model: /api/model?scope=app:lu[&model_id=7][&format=json|dot|svg]; the newest when no id is given.
    The SVG marks the edges of the scope's open anomalies."""
    record = tables.model_record(con, _one(params, "scope"), _one(params, "model_id", int))
    fmt, scope = _one(params, "format", default="json"), record["scope"]
    if fmt == "dot":
        return Text(CausalModel.from_json(record).to_dot(scope), "text/vnd.graphviz")
    if fmt == "svg":
        marked = {(a["src"], a["dst"]) for a in tables.anomalies(con, scope, open_only=True)}
        return Text(model_svg(CausalModel.from_json(record), anomalous=marked, title=scope), "image/svg+xml")
    if fmt != "json":
        raise InputError(f"format: expected json, dot or svg, got {fmt!r}")
    return record


def anomalies(params: dict, con) -> list[dict]:
    """Dependency anomalies, newest first: /api/anomalies?scope=app:lu&open=1."""
    return tables.anomalies(con, _one(params, "scope"), open_only=_one(params, "open", int, 0) == 1,
                            limit=_one(params, "limit", int, 200))


ROUTES: dict[str, Callable] = {
    "/api/stats": stats, "/api/nodes": nodes, "/api/query": query, "/api/bottlenecks": bottlenecks,
    "/api/rank": rank, "/api/regions": regions, "/api/tasks": tasks, "/api/samples": samples,
    "/api/bbv-targets": bbv_targets, "/api/bbv": bbv, "/api/models": models, "/api/model": model,
    "/api/anomalies": anomalies}


# ---- POST routes ---------------------------------------------------------------------------------

def register_kit(params: dict, body, con, write) -> dict:
    """Register a built kit: POST /api/kits with {"manifest": {...}, "path": "..."}."""
    if not isinstance(body, dict) or not isinstance(body.get("manifest"), dict):
        raise InputError('body: expected {"manifest": {...}, "path": "..."}')
    try:
        row = kit_row(body["manifest"], str(body.get("path", "")))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"manifest: {e}") from None
    write(lambda c: store.register_kit(c, row))
    return {"registered": {"app": row["app"], "kit": row["kit"]}}


def pin_baseline(params: dict, body, con, write) -> dict:
    """Pin a model version as its scope's baseline: POST /api/baseline?scope=app:lu&model_id=7."""
    scope, model_id = _one(params, "scope"), _one(params, "model_id", int)
    if not scope or model_id is None:
        raise InputError("POST /api/baseline needs ?scope=NAME&model_id=N")
    if tables.model_graph(con, scope, model_id) is None:
        raise InputError(f"scope {scope!r} has no model {model_id}")
    write(lambda c: store.set_baseline(c, scope, model_id, "pinned", time.time()))
    return {"scope": scope, "baseline": model_id}


POST_ROUTES: dict[str, Callable] = {"/api/kits": register_kit, "/api/baseline": pin_baseline}


def arrow_bytes(frame: pd.DataFrame) -> bytes:
    """A frame as an Arrow IPC stream; `frame.attrs` travel as JSON in the schema metadata."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"causewatch": json.dumps(frame.attrs).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpApi:
    def __init__(self, address: str, exporter, cursor: Callable, write: Callable | None = None,
                 routes: dict[str, Callable] | None = None, token: str = ""):
        host, _, port = address.rpartition(":")
        self.routes = dict(ROUTES, **(routes or {}))
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/metrics":
                    return self._reply(200, exporter.exposition(), "text/plain; version=0.0.4")
                self._answer(url, api.routes, lambda route, params, con: route(params, con))

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
                raw = self.rfile.read(length)

                def call(route, params, con):
                    try:
                        body = json.loads(raw) if raw else None
                    except ValueError as e:
                        raise InputError(f"body: not JSON ({e})") from None
                    return route(params, body, con, write)
                self._answer(url, POST_ROUTES, call)

            def _answer(self, url, routes: dict, call):
                route = routes.get(url.path)
                if route is None:
                    known = ", ".join(["/metrics", *sorted(routes)]) if routes is api.routes else ", ".join(routes)
                    return self._json(404, {"error": f"no route {url.path} (known: {known})"})
                params = urllib.parse.parse_qs(url.query)
                try:
                    with cursor() as con:
                        result = call(route, params, con)
                except CausewatchError as e:
                    return self._json(400, {"error": str(e)})
                except Exception as e:
                    log.exception("%s %s failed", self.command, self.path)
                    return self._json(500, {"error": f"{type(e).__name__}: {e}"})
                if isinstance(result, pd.DataFrame):
                    return self._reply(200, arrow_bytes(result), ARROW)
                if isinstance(result, Text):
                    return self._reply(200, result.encode(), result.ctype)
                self._json(200, result)

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

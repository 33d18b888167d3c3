"""The daemon's HTTP API routes, run in the API worker (a child: the daemon never loads pandas or the
analytics): a route's answer as (status, bytes, content type) for daemon/httpapi.py to send.

A GET route is a function (query params, read cursor) -> JSON-able, text, or a DataFrame (sent as an
Arrow IPC stream, so a CLI reading a live daemon gets the frame a stopped store gives); a POST route
also gets the request's JSON body and the writer. An InputError is a 400 naming the bad thing.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable

import pandas as pd
import pyarrow as pa

from causewatch.analytics.causal import CausalModel, model_svg
from causewatch.analytics.fuzzy import find_bottlenecks, perfql, summarise_bottlenecks
from causewatch.analytics.fuzzy.summaries import records
from causewatch.daemon import readers, store
from causewatch.daemon.cursor import Cursor
from causewatch.errors import CausewatchError, InputError
from causewatch.probe.rank import RATIO, rank_nodes
from causewatch.probe.registry import kit_row

log = logging.getLogger("causewatch.daemon.http")
ARROW = "application/vnd.apache.arrow.stream"


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
    return {"tables": readers.report.table_counts(con), "samples_per_metric": readers.samples.samples_per_metric(con)}


def nodes(params: dict, con) -> list[dict]:
    return readers.report.nodes(con)


def query(params: dict, con) -> list[dict]:
    """PERFQL over the live store: /api/query?q=(cpi is high)&min_degree=0.3&top=10&last=3600."""
    text = _one(params, "q")
    if not text:
        raise InputError("q: give a PERFQL statement, e.g. /api/query?q=(cpi is high)")
    try:
        found = readers.regions.perfql_matches(con, perfql.Query(text), _since(params), nodes=params.get("node"),
                                      min_degree=_one(params, "min_degree", float, 0.0), top=_one(params, "top", int))
    except ValueError as e:
        raise InputError(str(e)) from None
    return records(found)


def bottlenecks(params: dict, con) -> list[dict]:
    """Fuzzy bottleneck search over the live store: /api/bottlenecks?top=20&last=600."""
    found = find_bottlenecks(readers.regions.region_summaries(con, _since(params), nodes=params.get("node")))
    return records(summarise_bottlenecks(found).head(_one(params, "top", int)))


def rank(params: dict, con) -> dict:
    """Nodes ranked by predicted task time for an app, with what `ratio` compares: /api/rank?app=lu."""
    app = _one(params, "app")
    if not app:
        raise InputError("GET /api/rank needs ?app=NAME")
    nodes = rank_nodes(app, readers.probes.latest_probes(con, app), readers.probes.registered_kits(con), time.time())
    return {"app": app, "ratio": RATIO, "nodes": nodes}


def regions(params: dict, con) -> pd.DataFrame:
    """Region summaries (Arrow): /api/regions?last=600&node=n1&metric=cpi (node, metric repeatable)."""
    return readers.regions.region_summaries(con, _since(params), nodes=params.get("node"),
                                            metrics=params.get("metric"))


def tasks(params: dict, con) -> pd.DataFrame:
    """Stored tasks (Arrow) with positional param/counter columns; their keys in the schema metadata."""
    frame, pkeys, ckeys = readers.tasks.task_frame(con, _one(params, "app"))
    frame.attrs.update(params=pkeys, counters=ckeys)
    return frame


def samples(params: dict, con) -> pd.DataFrame:
    """Stored samples, long (Arrow): /api/samples?metric=cpu_seconds&scope=node."""
    return readers.samples.samples_frame(con, params.get("metric"), _one(params, "scope"))


def bbv_targets(params: dict, con) -> pd.DataFrame:
    return readers.phases.bbv_targets(con)


def bbv(params: dict, con) -> pd.DataFrame:
    """One target's vectors of one kind, long (Arrow): /api/bbv?target=app:x&kind=python."""
    target, kind = _one(params, "target"), _one(params, "kind")
    if not target or not kind:
        raise InputError("GET /api/bbv needs ?target=NAME&kind=native|python")
    return readers.phases.bbv_rows(con, target, kind)


def models(params: dict, con) -> list[dict]:
    """Model versions, newest first: /api/models?scope=app:lu."""
    return readers.models.models(con, _one(params, "scope"))


def model(params: dict, con):
    """A model: /api/model?scope=app:lu[&model_id=7][&format=json|dot|svg]; the newest when no id is given.
    The SVG marks the edges of the scope's open anomalies."""
    record = readers.models.model_record(con, _one(params, "scope"), _one(params, "model_id", int))
    fmt, scope = _one(params, "format", default="json"), record["scope"]
    if fmt == "dot":
        return Text(CausalModel.from_json(record).to_dot(scope), "text/vnd.graphviz")
    if fmt == "svg":
        marked = {(a["src"], a["dst"]) for a in readers.models.anomalies(con, scope, open_only=True)}
        return Text(model_svg(CausalModel.from_json(record), anomalous=marked, title=scope), "image/svg+xml")
    if fmt != "json":
        raise InputError(f"format: expected json, dot or svg, got {fmt!r}")
    return record


def anomalies(params: dict, con) -> list[dict]:
    """Dependency anomalies, newest first: /api/anomalies?scope=app:lu&open=1."""
    return readers.models.anomalies(con, _one(params, "scope"), open_only=_one(params, "open", int, 0) == 1,
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
    write(functools.partial(store.results.register_kit, row=row))
    return {"registered": {"app": row["app"], "kit": row["kit"]}}


def pin_baseline(params: dict, body, con, write) -> dict:
    """Pin a model version as its scope's baseline: POST /api/baseline?scope=app:lu&model_id=7."""
    scope, model_id = _one(params, "scope"), _one(params, "model_id", int)
    if not scope or model_id is None:
        raise InputError("POST /api/baseline needs ?scope=NAME&model_id=N")
    if readers.models.model_graph(con, scope, model_id) is None:
        raise InputError(f"scope {scope!r} has no model {model_id}")
    write(functools.partial(store.results.set_baseline, scope=scope, model_id=model_id, how="pinned",
                            now=time.time()))
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


def _json(code: int, obj) -> tuple[int, bytes, str]:
    return code, json.dumps(obj, default=str).encode(), "application/json"


def answer(method: str, path: str, params: dict, raw: bytes, cursor: Cursor, write) -> tuple[int, bytes, str]:
    """The answer to `method path?params` (POST: with body `raw`), reading through `cursor` and writing
    with `write(fn)` (remote.answer gives the daemon's; a test, a DuckDB file's)."""
    routes = ROUTES if method == "GET" else POST_ROUTES
    route = routes.get(path)
    if route is None:
        known = ", ".join(["/metrics", *sorted(routes)]) if method == "GET" else ", ".join(routes)
        return _json(404, {"error": f"no route {path} (known: {known})"})
    try:
        if method == "GET":
            result = route(params, cursor)
        else:
            try:
                body = json.loads(raw) if raw else None
            except ValueError as e:
                raise InputError(f"body: not JSON ({e})") from None
            result = route(params, body, cursor, write)
    except CausewatchError as e:
        return _json(400, {"error": str(e)})
    except Exception as e:
        log.exception("%s %s failed", method, path)
        return _json(500, {"error": f"{type(e).__name__}: {e}"})
    if isinstance(result, pd.DataFrame):
        return 200, arrow_bytes(result), ARROW
    if isinstance(result, Text):
        return 200, result.encode(), result.ctype
    return _json(200, result)

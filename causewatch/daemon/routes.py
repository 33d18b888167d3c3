"""The handlers of the API's verbs (declared in daemon/verbs.py) and `answer`, which routes a request to
one: run in the API worker for the daemon's HTTP API, and by the CLI's store source on a stopped store.

A read verb's handler takes a cursor and its parameters and returns something JSON-able, text, or a
DataFrame: JSON records (NaN as null) by default, so `curl` reads it, or an Arrow IPC stream when the
request accepts `verbs.ARROW` (the CLI's daemon source asks so, and gets the DataFrame a stopped store
gives). A DataFrame with `attrs` answers in JSON {"attrs": {...}, "records": [...]}. A write verb's
handler also gets the writer and the request's JSON body. An InputError is a 400 naming the bad thing,
a NotFoundError (nothing there yet: no model, no probe results for the app) a 404.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time

import pandas as pd
import pyarrow as pa

from causewatch import wire
from causewatch.analytics.causal import CausalModel, model_svg
from causewatch.analytics.fuzzy import find_bottlenecks, perfql, summarise_bottlenecks
from causewatch.analytics.fuzzy.summaries import KEYS, records
from causewatch.daemon import learning, promjson, promql, rangeq, readers, store, verbs
from causewatch.daemon.cursor import Cursor
from causewatch.errors import CausewatchError, InputError, NotFoundError
from causewatch.probe import broker, extender
from causewatch.probe.rank import RATIO, failed_line, rank_nodes
from causewatch.probe.registry import kit_row

log = logging.getLogger("causewatch.daemon.http")


def _since(last: float | None) -> float | None:
    return None if last is None else time.time() - last


# ---- read verbs: handler(cursor, **params) ------------------------------------------------------

@verbs.STATS.handles
def stats(con: Cursor) -> dict:
    """Row counts per table and per sample metric."""
    return {"tables": readers.report.table_counts(con), "samples_per_metric": readers.samples.samples_per_metric(con)}


@verbs.COUNTS.handles
def counts(con: Cursor) -> dict:
    """Frames, sample rows, metrics, phase vectors, tasks and regions stored so far: /api/counts."""
    return readers.report.live_counts(con)


@verbs.OVERVIEW.handles
def overview(con: Cursor) -> dict:
    """The store at a glance, each analysis' latest output with it: /api/overview."""
    return readers.report.overview(con)


@verbs.NODES.handles
def nodes(con: Cursor) -> list[dict]:
    return readers.report.nodes(con)


@verbs.QUERY.handles
def query(con: Cursor, q, last, node, min_degree, top, mode) -> list[dict]:
    """PERFQL over the store: /api/query?q=(cpi is high)&min_degree=0.3&top=10&last=3600[&mode=exact]."""
    if not q:
        raise InputError("q: give a PERFQL statement, e.g. /api/query?q=(cpi is high)")
    try:
        found = readers.regions.perfql_matches(con, perfql.Query(q, mode=mode), _since(last), nodes=node,
                                               min_degree=min_degree, top=top)
    except ValueError as e:
        raise InputError(f"query: {e}") from None
    return records(found)


@verbs.BOTTLENECKS.handles
def bottlenecks(con: Cursor, last, node, top, metric, mode, negligible) -> list[dict]:
    """Fuzzy bottleneck search over the store: /api/bottlenecks?top=20&last=600[&metric=cpi][&negligible=0]
    (the default term sets: `causewatch bottlenecks --terms FILE` scores its own regions' copy)."""
    try:
        found = find_bottlenecks(readers.regions.region_summaries(con, _since(last), nodes=node), None, metric,
                                 mode, bool(negligible))
    except ValueError as e:
        raise InputError(f"bottlenecks: {e}") from None
    return records(summarise_bottlenecks(found).head(top))


@verbs.RANK.handles
def rank(con: Cursor, app) -> dict:
    """Nodes ranked by predicted task time for an app, with what `ratio` compares: /api/rank?app=lu.
    An app without probe results is a 404 naming the apps with results."""
    if not app:
        raise InputError("GET /api/rank needs ?app=NAME")
    latest, kits = readers.probes.latest_probes(con, app), readers.probes.registered_kits(con)
    failed = readers.probes.failed_probes(con, app)
    if not latest:
        apps = readers.probes.probed_apps(con)
        if failed:
            hint = "; ".join(failed_line(f, time.time()) for f in failed)
        elif any(k["app"] == app for k in kits):
            hint = "its kit is registered, and the nodes' probes have not come back yet (causewatch probe status)"
        elif apps:
            hint = f"apps with results: {', '.join(apps)}"
        else:
            hint = "no app has any yet: build a kit (causewatch probe build) and register it (probe register)"
        raise NotFoundError(f"no probe results for app {app!r}; {hint}")
    return {"app": app, "ratio": RATIO, "nodes": rank_nodes(app, latest, kits, time.time()), "failed": failed}


@verbs.PROBE_STATUS.handles
def probe_status(con: Cursor, app) -> list[dict]:
    """Each node's probe of each kit (of `app`, or all): /api/probe-status[?app=mw]."""
    return readers.probes.probe_states(con, app)


@verbs.REGIONS.handles
def regions(con: Cursor, last, node, metric, limit) -> pd.DataFrame:
    """Region summaries, the largest time share first: /api/regions?last=600&node=n1&metric=cpi&limit=20
    (node, metric repeatable; `limit` rows at most)."""
    df = readers.regions.region_summaries(con, _since(last), nodes=node, metrics=metric)
    return df.sort_values(["time_share", *KEYS], ascending=[False] + [True] * len(KEYS),
                          ignore_index=True).head(limit)


@verbs.TASKS.handles
def tasks(con: Cursor, app, limit) -> pd.DataFrame:
    """Stored tasks, the first received first: /api/tasks?app=lu&limit=100. Positional param/counter
    columns, mapped to their keys by `attrs` {"params": {"p0": key}, "counters": {"c0": key}}: in
    Arrow the schema's metadata, in JSON the envelope {"attrs": {...}, "records": [...]}."""
    df, pkeys, ckeys = readers.tasks.task_df(con, app, limit=limit)
    df.attrs.update(params=pkeys, counters=ckeys)
    return df


@verbs.TASK_APPS.handles
def task_apps(con: Cursor) -> list[dict]:
    """The apps with stored tasks: /api/task-apps."""
    return [{"app": app} for app in readers.tasks.task_apps(con)]


@verbs.SAMPLES.handles
def samples(con: Cursor, metric, scope, limit) -> pd.DataFrame:
    """Stored samples, long, oldest first: /api/samples?metric=cpu_seconds&scope=node&limit=1000."""
    return readers.samples.samples_df(con, metric, scope, limit=limit)


@verbs.RANGE.handles
def range_query(con: Cursor, metric, node, scope, start, end, step, window, fn, agg, by, partial) -> pd.DataFrame:
    """A range question answered in the store: /api/range?metric=cpu&start=T0&end=T1&step=60&fn=avg
    [&window=300][&agg=avg&by=node][&node=n1][&scope=node] (times in seconds; the last hour by default):
    rows (labels, t, value), each series' or each group's."""
    end = time.time() if end is None else end
    matchers = [_one_of("metric", metric), _one_of("node", node), scope and ("scope", "=", scope)]
    matchers = [m for m in matchers if m]
    q = rangeq.question(matchers, end - 3600 if start is None else start, end, step, window, fn, agg or None, by)
    return readers.ranges.answer(con, q, bool(partial)).to_pandas()


def _one_of(label: str, values: list[str] | None) -> tuple | None:
    """A matcher of any of these values: one by equality, which prunes the lake's row groups, several by
    an alternation."""
    if not values:
        return None
    return (label, "=", values[0]) if len(values) == 1 else (label, "=~", "|".join(map(re.escape, values)))


JSON = "application/json"


@verbs.PROMQL_RANGE.handles
def promql_range(con: Cursor, query, start, end, step, timeout, partial):
    """Prometheus' query_range for a PromQL subset (daemon/promql.py):
    /api/v1/query_range?query=avg by (node) (avg_over_time(cpu[5m]))&start=T0&end=T1&step=60s
    (times Unix or RFC 3339; step seconds or a duration); a matrix in Prometheus' JSON."""
    for name, value in (("start", start), ("end", end), ("step", step)):
        if value is None:
            raise InputError(f"{name}: missing (query_range takes query, start, end and step)")
    parsed = promql.parse(query)
    q = rangeq.question(parsed.matchers, promql.timestamp(start, "start"), promql.timestamp(end, "end"),
                        promql.duration(step), parsed.window, parsed.fn, parsed.agg, parsed.by)
    table = readers.ranges.answer(con, q, bool(partial))
    return table.to_pandas() if partial else verbs.Text(promjson.matrix(table, q.labels), JSON)


@verbs.PROMQL_QUERY.handles
def promql_query(con: Cursor, query, time, timeout, partial):
    """Prometheus' instant query for the PromQL subset, at `time` (now by default): /api/v1/query?query=
    max by (node) (load1)&time=T; a vector in Prometheus' JSON, or a scalar for arithmetic of numbers."""
    at = _now() if time is None else promql.timestamp(time, "time")
    number = promql.scalar(query)
    if number is not None:
        return verbs.Text(promjson.scalar(at, number), JSON)
    parsed = promql.parse(query)
    q = rangeq.question(parsed.matchers, at, at, parsed.window, parsed.window, parsed.fn, parsed.agg, parsed.by)
    table = readers.ranges.answer(con, q, bool(partial))
    return table.to_pandas() if partial else verbs.Text(promjson.vector(table, q.labels), JSON)


def _now() -> float:
    return time.time()


def _selectors(match: list[str] | None) -> list:
    return [promql.selector(m) for m in match or ()]


@verbs.LABELS.handles
def label_names(con: Cursor, match, start, end) -> dict:
    """Prometheus' label names of the series (those `match[]` selects): /api/v1/labels[?match[]=up]."""
    return promjson.listed(readers.labels.names(con, _selectors(match)))


@verbs.LABEL_VALUES.handles
def label_values(con: Cursor, name, match, start, end) -> dict:
    """A label's values: /api/v1/label/__name__/values[?match[]={node="n1"}] (also ?name=__name__)."""
    if not name:
        raise InputError("name: give the label, as /api/v1/label/NAME/values")
    return promjson.listed(readers.labels.values(con, name, _selectors(match)))


@verbs.SERIES.handles
def series(con: Cursor, match, start, end) -> dict:
    """The label sets of the series `match[]` selects: /api/v1/series?match[]=up&match[]={node="n1"}."""
    if not match:
        raise InputError("match[]: give at least one series selector, e.g. match[]=up or match[]={node=\"n1\"}")
    return promjson.listed(readers.labels.label_sets(con, _selectors(match)))


@verbs.BBV_TARGETS.handles
def bbv_targets(con: Cursor, limit) -> pd.DataFrame:
    """The targets and kinds of phase vectors stored, most vectors first: /api/bbv-targets?limit=10."""
    return readers.phases.bbv_targets(con, limit=limit)


@verbs.BBV.handles
def bbv(con: Cursor, target, kind) -> pd.DataFrame:
    """One target's vectors of one kind, long (a row per vector and key; no `limit`, which would cut a
    vector): /api/bbv?target=app:x&kind=python."""
    if not target or not kind:
        raise InputError("GET /api/bbv needs ?target=NAME&kind=native|python")
    return readers.phases.bbv_rows(con, target, kind)


@verbs.MODELS.handles
def models(con: Cursor, scope) -> list[dict]:
    """Model versions, newest first: /api/models?scope=app:lu."""
    return readers.models.models(con, scope)


@verbs.MODEL.handles
def model(con: Cursor, scope, model_id, format):
    """A model: /api/model?scope=app:lu[&model_id=7][&format=json|dot|svg]; the newest when no id is given.
    The SVG marks the edges of the scope's open anomalies and names each one's first cause under its legend."""
    record = readers.models.model_record(con, scope, model_id)
    scope = record["scope"]
    if format == "dot":
        return verbs.Text(CausalModel.from_json(record).to_dot(scope), "text/vnd.graphviz")
    if format == "svg":
        found = readers.models.anomalies(con, scope, open_only=True)
        marked = {(a["src"], a["dst"]) for a in found}
        return verbs.Text(model_svg(CausalModel.from_json(record), anomalous=marked, title=scope,
                                    notes=[_cause_note(a) for a in found]), "image/svg+xml")
    if format != "json":
        raise InputError(f"format: expected json, dot or svg, got {format!r}")
    return record


def _cause_note(a: dict) -> str:
    """An open anomaly's first cause in one line, as the picture names it."""
    causes = a["evidence"].get("causes") or []
    first = (f"first cause {causes[0]['unit']} (score {causes[0]['score']:.2f})" if causes
             else "causes not ranked")
    return f"{a['kind']} {a['src']} -> {a['dst']}: {first}"


@verbs.ANOMALIES.handles
def anomalies(con: Cursor, scope, open, limit) -> list[dict]:
    """Dependency anomalies, newest first: /api/anomalies?scope=app:lu&open=1."""
    return readers.models.anomalies(con, scope, open_only=open == 1, limit=limit)


@verbs.LEARN.handles
def learn(con: Cursor, data, app, metric, bucket, rows, columns, discrete, tier, forbid, require, max_depth,
          estimator, alpha, equivalences, submodels, dot, tetrad) -> dict:
    """A causal model of the newest stored tasks or samples (rows, default 2000; 0: all) and its report:
    /api/learn?data=tasks&app=lu[&rows=5000&estimator=fisher-z&alpha=0.05&max_depth=2&tier=inputs:n
    &forbid=a-b&require=a->b&submodels=1&dot=1]."""
    df, inputs, drop = learning.stored(con, data, app, metric, bucket, rows)
    options = learning.Options(columns=learning.names(columns) or None, discrete=learning.names(discrete),
                               tiers=tier or [], forbid=forbid or [], require=require or [], max_depth=max_depth,
                               estimator=estimator, alpha=alpha, equivalences=bool(equivalences),
                               submodels=bool(submodels), dot=bool(dot), tetrad=bool(tetrad))
    return learning.learn(df, inputs, drop, options)


@verbs.JOBS.handles
def jobs(con: Cursor, kind, user, node, state, last, limit) -> list[dict]:
    """The units the agents followed, newest first, with owner, allocation and efficiency so far:
    /api/jobs[?user=ann&state=running&node=n1&last=3600&kind=job|step|service|container|pod&limit=200]."""
    if kind not in wire.UNIT_KINDS:
        raise InputError(f"kind: expected one of {', '.join(wire.UNIT_KINDS)}, got {kind!r}")
    if state not in verbs.UNIT_STATES:
        raise InputError(f"state: expected one of {', '.join(verbs.UNIT_STATES)}, got {state!r}")
    return readers.units.listing(con, kind, user, node, state, _since(last), limit)


@verbs.JOB.handles
def job(con: Cursor, id, node) -> list[dict]:
    """A Slurm job's efficiency report on each node it ran on: /api/job?id=42[&node=n1]. CPU use against
    its allocation, memory high-water against its request, I/O, pressure, its phase mix, its steps, the
    anomalies during it; a job no agent saw is a 404 naming the newest ones."""
    if not id:
        raise InputError("id: give a Slurm job id, e.g. /api/job?id=42")
    found = readers.units.report(con, id, node)
    if not found:
        known = [r["job_id"] for r in readers.units.units(con, "job", nodes=node, limit=10)]
        raise NotFoundError(f"no job {id!r} was seen by an agent" + (f"; the newest: {', '.join(known)}" if known
                                                                     else "; none yet"))
    return found


# ---- write verbs: handler(cursor, write, body, **params) -----------------------------------------

@verbs.KITS.handles
def register_kit(con: Cursor, write, body) -> dict:
    """Register a built kit: POST /api/kits with {"manifest": {...}, "path": "..."}."""
    if not isinstance(body, dict) or not isinstance(body.get("manifest"), dict):
        raise InputError('body: expected {"manifest": {...}, "path": "..."}')
    try:
        row = kit_row(body["manifest"], str(body.get("path", "")))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"manifest: {e}") from None
    write(functools.partial(store.results.register_kit, row=row))
    return {"registered": {"app": row["app"], "kit": row["kit"]}}


@verbs.BASELINE.handles
def pin_baseline(con: Cursor, write, body, scope, model_id) -> dict:
    """Pin a model version as its scope's baseline: POST /api/baseline?scope=app:lu&model_id=7."""
    if not scope or model_id is None:
        raise InputError("POST /api/baseline needs ?scope=NAME&model_id=N")
    if readers.models.model_graph(con, scope, model_id) is None:
        raise InputError(f"scope {scope!r} has no model {model_id}")
    write(functools.partial(store.results.set_baseline, scope=scope, model_id=model_id, how="pinned",
                            now=time.time()))
    return {"scope": scope, "baseline": model_id}


@verbs.PRIORITIZE.handles
def prioritize(con: Cursor, write, body, app, max_age) -> list[dict]:
    """A scheduler extender's prioritize: POST /api/k8s/prioritize[?app=mw] with ExtenderArgs; answers a
    HostPriorityList [{"Host", "Score"}], 0-10, each candidate once in the request's order. The pod's
    `causewatch/app` label names the app (else `app`); no app, or no results for it, scores every node 0."""
    hosts = extender.candidate_hosts(body)
    app = extender.pod_app(body) or app
    if max_age is not None and not max_age >= 0:
        raise InputError(f"max_age: expected seconds >= 0, got {max_age!r}")
    latest = readers.probes.latest_probes(con, app) if app else []
    rows = rank_nodes(app, latest, readers.probes.registered_kits(con), time.time()) if latest else []
    return broker.extender_scores(rows, hosts, broker.MAX_AGE if max_age is None else max_age)


def arrow_bytes(df: pd.DataFrame) -> bytes:
    """A DataFrame as an Arrow IPC stream; `df.attrs` travel as JSON in the schema metadata."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"causewatch": json.dumps(df.attrs).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _json(code: int, obj) -> tuple[int, bytes, str]:
    return code, json.dumps(obj, default=str).encode(), "application/json"


def _error(verb: verbs.Verb, message: str, kind: str) -> dict:
    """An error answer in the verb's shape: causewatch's {"error"}, or Prometheus' with its errorType."""
    return promjson.error(message, kind) if verb.errors == "prometheus" else {"error": message}


def answer(method: str, path: str, params: dict, raw: bytes, cursor: Cursor, write,
           accept: str = "") -> tuple[int, bytes, str]:
    """The answer to `method path?params` (POST: with body `raw`), reading through `cursor` and writing
    with `write(fn)` (remote.answer gives the daemon's; a test, a DuckDB file's). A DataFrame answers
    as Arrow when `accept` (the request's Accept header) names verbs.ARROW, else as JSON."""
    verb, named = verbs.find(method, path)
    if verb is None:
        known = sorted(v.path for v in verbs.VERBS.values() if v.method == method)
        return _json(404, {"error": f"no route {method} {path} (known: {', '.join(['/metrics', *known])})"})
    params = {**params, **named}
    try:
        if method == "GET":
            result = verb.call(cursor, **verb.parse(params))
        else:
            try:
                body = json.loads(raw) if raw else None
            except (ValueError, RecursionError) as e:   # RecursionError: nested deeper than the parser goes
                raise InputError(f"body: not JSON ({e})") from None
            result = verb.call(cursor, write, body, **verb.parse(params))
    except NotFoundError as e:
        return _json(404, _error(verb, str(e), "not_found"))
    except CausewatchError as e:
        return _json(400, _error(verb, str(e), "bad_data"))
    except Exception as e:
        log.exception("%s %s failed", method, path)
        return _json(500, _error(verb, f"{type(e).__name__}: {e}", "internal"))
    if isinstance(result, pd.DataFrame):
        if verbs.ARROW in accept:
            return 200, arrow_bytes(result), verbs.ARROW
        return _json(200, {"attrs": result.attrs, "records": records(result)} if result.attrs else records(result))
    if isinstance(result, verbs.Text):
        return 200, result.encode(), result.ctype
    return _json(200, result)

"""Every verb of a causewatch store's API, declared once: its name (the route /api/NAME and what the CLI's
sources call), its parameters, how a cluster joins its shards' answers (`merge`, run by cluster.py), and its
handler, bound where the handlers are (routes.py, `@VERB.handles`).

A read verb (GET) is handled by handler(cursor, **params); a write verb (POST) by handler(cursor, write,
body, **params). The declarations load no pandas: the CLI's daemon source builds its requests from them.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable

from causewatch.errors import InputError

ARROW = "application/vnd.apache.arrow.stream"   # the Accept value that asks a frame verb for Arrow, not JSON


class Text(str):
    """A verb's plain-text answer, with its content type (a model as DOT or SVG)."""

    def __new__(cls, text: str, ctype: str = "text/plain"):
        obj = super().__new__(cls, text)
        obj.ctype = ctype
        return obj


# Param and Merge are named tuples, not dataclasses: every data verb's CLI imports this module, `--help`
# too, and dataclasses loads inspect and ast.
class Param(namedtuple("Param", "name kind many default", defaults=(str, False, None))):
    """A query parameter, which is also the reader's keyword: `kind` converts a query value, `many`
    takes every value given (a list), `default` stands in when it is not given."""
    __slots__ = ()


# What a cluster does with the shards' answers to a verb (daemon/cluster.py has one joiner each):
MERGE_KINDS = {
    "tables": "Arrow tables concatenated, sorted by `order`, cut by the `limit` parameter",
    "records": "JSON records concatenated with their shard, sorted by `order`, cut by the `cut` parameter",
    "summed": "counts summed",
    "ranked": "nodes ranked again across the shards",
    "newest": "the newest record among the shards'",
    "fanned": "a write sent to every shard, each shard's answer kept",
    "local": "this shard's answer alone, the others named missing with `reason`",
    "own": "this shard's answer unchanged (a caller that expects its own format)",
    "partials": "each shard's partial aggregates per group and time (asked with `partial=1`), joined and finished "
                "as one answer (daemon/rangeq.py)",
}


class Merge(namedtuple("Merge", "kind order cut reason")):
    """A verb's merge rule: `kind` one of MERGE_KINDS, `order` (column, descending) keys of the merged
    rows, `cut` the parameter that cuts them, `reason` why the verb is one shard's."""
    __slots__ = ()

    def __new__(cls, kind: str, order: tuple = (), cut: str | None = None, reason: str = ""):
        if kind not in MERGE_KINDS:
            raise ValueError(f"merge kind {kind!r}: expected one of {', '.join(MERGE_KINDS)}")
        return super().__new__(cls, kind, order, cut, reason)


def tables(*order: tuple[str, bool]) -> Merge:
    return Merge("tables", order)


def records(*order: tuple[str, bool], cut: str | None = None) -> Merge:
    return Merge("records", order, cut)


def local(reason: str) -> Merge:
    return Merge("local", reason=reason)


SUMMED, RANKED, NEWEST, FANNED, OWN, PARTIALS = (Merge(k) for k in ("summed", "ranked", "newest", "fanned", "own",
                                                                   "partials"))


class Verb:
    """A verb: `call(*leading, **kwargs)` calls its handler with every parameter (defaults filled in);
    `parse` turns a query string's parameters into those keywords and `query` keywords into its."""

    def __init__(self, name: str, *params: Param, merge: Merge, method: str = "GET", writes: bool | None = None,
                 errors: str = "causewatch"):
        """`errors`: the shape of its error answers, causewatch's {"error"} or "prometheus" (its API's)."""
        self.name, self.path, self.method, self.merge, self.errors = name, f"/api/{name}", method, merge, errors
        # a POST that only reads (a scheduler's question in a body) is open to any host, as GETs are
        self.writes = method == "POST" if writes is None else writes
        self.params = {p.name: p for p in params}
        if merge.cut is not None and merge.cut not in self.params:
            raise ValueError(f"{name}: merge cut {merge.cut!r} is not one of its parameters")
        self.handler: Callable | None = None

    def __repr__(self) -> str:
        return f"Verb({self.name!r})"

    def handles(self, fn: Callable) -> Callable:
        """Decorator: `fn` is this verb's handler."""
        self.handler = fn
        return fn

    def call(self, *leading, **kwargs):
        self._check(kwargs)
        if self.handler is None:
            raise RuntimeError(f"{self.name}: no handler bound (causewatch.daemon.routes binds them)")
        return self.handler(*leading, **{name: kwargs.get(name, p.default) for name, p in self.params.items()})

    def _check(self, kwargs: dict) -> None:
        unknown = set(kwargs) - set(self.params)
        if unknown:
            raise TypeError(f"{self.name}: no parameter {', '.join(sorted(unknown))} "
                            f"(takes {', '.join(self.params) or 'none'})")

    def parse(self, query: dict[str, list[str]]) -> dict:
        """Keywords from a parsed query string; a parameter the verb does not take, or a value that does
        not convert, is an InputError naming it."""
        unknown = sorted(set(query) - set(self.params))
        if unknown:
            raise InputError(f"{', '.join(unknown)}: {self.path} takes no such parameter "
                             f"(takes {', '.join(self.params) or 'none'})")
        kwargs = {}
        for name, p in self.params.items():
            if name in query:
                values = query[name] if p.many else query[name][-1:]
                try:
                    converted = [p.kind(v) for v in values]
                except ValueError:
                    raise InputError(f"{name}: expected a {p.kind.__name__}, got {values[-1]!r}") from None
                kwargs[name] = converted if p.many else converted[0]
        return kwargs

    def query(self, **kwargs) -> dict:
        """The query-string parameters of these keywords (None left out, a list for `many`)."""
        self._check(kwargs)
        return {k: v for k, v in kwargs.items() if v is not None}


def count(value: str) -> int:
    """A number of rows: a whole number, 0 or more."""
    n = int(value)
    if n < 0:
        raise ValueError(f"{n} < 0")
    return n


LAST = Param("last", float)          # seconds back from now: records that started since then
NODE = Param("node", many=True)
LIMIT = Param("limit", count)        # at most this many rows, the first in the verb's order

STATS = Verb("stats", merge=SUMMED)
NODES = Verb("nodes", merge=records(("node", False)))
MODE = Param("mode", default="compatible")   # fuzzy membership functions: compatible or exact
QUERY = Verb("query", Param("q"), LAST, NODE, Param("min_degree", float, default=0.0), Param("top", int), MODE,
             merge=records(("degree", True), cut="top"))
BOTTLENECKS = Verb("bottlenecks", LAST, NODE, Param("top", int), Param("metric", many=True), MODE,
                   Param("negligible", int, default=1), merge=records(("severity", True), ("value", True), cut="top"))
RANK = Verb("rank", Param("app"), merge=RANKED)
# each node's probe of each kit: pending, done or failed
PROBE_STATUS = Verb("probe-status", Param("app"), merge=records(("node", False), ("app", False), ("kit", False)))
REGIONS = Verb("regions", LAST, NODE, Param("metric", many=True), LIMIT,
               merge=tables(("time_share", True), ("node", False)))
TASKS = Verb("tasks", Param("app"), LIMIT, merge=tables())   # tasks stay in shard order
# the apps with stored tasks: a scope's owner finds them on every shard
TASK_APPS = Verb("task-apps", merge=records(("app", False)))
SAMPLES = Verb("samples", Param("metric", many=True), Param("scope"), LIMIT,
               merge=tables(("ts", False), ("node", False), ("scope", False), ("metric", False)))
BBV_TARGETS = Verb("bbv-targets", LIMIT, merge=tables(("vectors", True), ("target", False), ("kind", False)))
BBV = Verb("bbv", Param("target"), Param("kind"),
           merge=tables(("t_start", False), ("node", False), ("boot", False), ("seq", False), ("key", False)))
MODELS = Verb("models", Param("scope"), merge=records(("learned_at", True)))
# the newest version among the shards' (a scope's owner holds its model: docs/shards.md)
MODEL = Verb("model", Param("scope"), Param("model_id", int), Param("format", default="json"), merge=NEWEST)
ANOMALIES = Verb("anomalies", Param("scope"), Param("open", int, default=0), Param("limit", count, default=200),
                 merge=records(("opened", True), cut="limit"))
# A causal model learnt on request from the store's tasks or samples (daemon/learning.py): `causewatch learn`'s
# flags as parameters (0/1 for the switches), its report as the answer. By default from the newest
# LEARN_ROWS rows, the causal job's window (its max_rows): an answer in seconds on a store of any age,
# learnt from what the daemon's own model sees.
LEARN_ROWS = 2000
LEARN = Verb("learn", Param("data"), Param("app"), Param("metric", many=True), Param("bucket", float),
             Param("rows", count, default=LEARN_ROWS),
             Param("columns"), Param("discrete"), Param("tier", many=True), Param("forbid", many=True),
             Param("require", many=True), Param("max_depth", int, default=3), Param("estimator", default="auto"),
             Param("alpha", float), Param("equivalences", int, default=1), Param("submodels", int, default=0),
             Param("dot", int, default=0), Param("tetrad", int, default=0),
             merge=local("learn reads the asking shard's rows only (ask each shard, or the scope's owner)"))

# A range question over the stored samples (daemon/rangeq.py, docs/queries.md), computed where they lie: times
# in seconds (start and end default to the last hour), `fn` over each series' window, `agg` across series by
# labels; `partial=1` answers the partial aggregates a cluster joins.
RANGE = Verb("range", Param("metric", many=True), NODE, Param("scope"), Param("start", float), Param("end", float),
             Param("step", float, default=60.0), Param("window", float), Param("fn", default="avg"), Param("agg"),
             Param("by", many=True), Param("partial", int, default=0), merge=PARTIALS)
# Prometheus' query_range for a PromQL subset (daemon/promql.py), as Grafana's Prometheus data source asks it
PROMQL_RANGE = Verb("v1/query_range", Param("query"), Param("start"), Param("end"), Param("step"),
                    Param("partial", int, default=0), merge=PARTIALS, errors="prometheus")

# The units the agents follow (docs/agent.md, "Units"): jobs by default, running, finished or all, per user
# and node, running at some time in the `last` seconds; and one Slurm job's report on each of its nodes.
UNIT_STATES = ("running", "finished", "all")
JOBS = Verb("jobs", Param("kind", default="job"), Param("user", many=True), NODE, Param("state", default="all"), LAST,
            Param("limit", count, default=200), merge=records(("started", True), ("node", False), cut="limit"))
JOB = Verb("job", Param("id"), NODE, merge=records(("started", True), ("node", False)))

# writes sent to every shard: a kit registered on each, a baseline pinned where its model is
KITS = Verb("kits", method="POST", merge=FANNED)        # body {"manifest": {...}, "path": "..."}
BASELINE = Verb("baseline", Param("scope"), Param("model_id", int), method="POST", merge=FANNED)
# A Kubernetes scheduler extender's prioritize call (docs/brokers.md): ExtenderArgs in, HostPriorityList out;
# `app` when the pod names none (label causewatch/app), `max_age` the seconds after which a result is stale.
PRIORITIZE = Verb("k8s/prioritize", Param("app"), Param("max_age", float), method="POST", writes=False, merge=OWN)
# What the store holds at a glance: `counts` cheaply, while data arrives (a progress line's), `overview` its
# rows and each analysis' latest output (the demo's report); each one store's figures.
COUNTS = Verb("counts", merge=local("counts of one store (a count of distinct metrics does not add up over shards)"))
OVERVIEW = Verb("overview", merge=local("an overview of one store: its rows, its newest model, its scores"))

VERBS = {(v.method, v.path): v for v in (STATS, NODES, QUERY, BOTTLENECKS, RANK, PROBE_STATUS, REGIONS, TASKS,
                                         TASK_APPS, SAMPLES, BBV_TARGETS, BBV, MODELS, MODEL, ANOMALIES, LEARN, KITS,
                                         BASELINE, PRIORITIZE, RANGE, PROMQL_RANGE,
                                         COUNTS, OVERVIEW, JOBS, JOB)}

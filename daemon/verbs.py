"""Every read verb of a causewatch store, declared once: its name (the route /api/NAME and what the CLI's
sources read), its parameters, and its reader, bound where the readers are (routes.py, `@VERB.reads`).

The declarations load no pandas: the CLI's daemon source builds its requests from them alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from causewatch.errors import InputError


class Text(str):
    """A verb's plain-text answer, with its content type (a model as DOT or SVG)."""

    def __new__(cls, text: str, ctype: str = "text/plain"):
        obj = super().__new__(cls, text)
        obj.ctype = ctype
        return obj


@dataclass(frozen=True)
class Param:
    """A query parameter, which is also the reader's keyword: `kind` converts a query value, `many`
    takes every value given (a list), `default` stands in when it is not given."""
    name: str
    kind: Callable = str
    many: bool = False
    default: Any = None


class Verb:
    """A read verb: `read(cursor, **kwargs)` calls its reader; `parse` turns a query string's
    parameters into those keywords and `query` turns keywords into the query string's."""

    def __init__(self, name: str, *params: Param):
        self.name, self.path = name, f"/api/{name}"
        self.params = {p.name: p for p in params}
        self.reader: Callable | None = None

    def __repr__(self) -> str:
        return f"Verb({self.name!r})"

    def reads(self, fn: Callable) -> Callable:
        """Decorator: `fn(cursor, **params)` is this verb's reader."""
        self.reader = fn
        return fn

    def read(self, cursor, **kwargs):
        unknown = set(kwargs) - set(self.params)
        if unknown:
            raise TypeError(f"{self.name}: no parameter {', '.join(sorted(unknown))} (takes {', '.join(self.params)})")
        if self.reader is None:
            raise RuntimeError(f"{self.name}: no reader bound (causewatch.daemon.routes binds them)")
        return self.reader(cursor, **{name: kwargs.get(name, p.default) for name, p in self.params.items()})

    def parse(self, query: dict[str, list[str]]) -> dict:
        """Keywords from a parsed query string; a value that does not convert is an InputError naming it."""
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
        unknown = set(kwargs) - set(self.params)
        if unknown:
            raise TypeError(f"{self.name}: no parameter {', '.join(sorted(unknown))} (takes {', '.join(self.params)})")
        return {k: v for k, v in kwargs.items() if v is not None}


LAST = Param("last", float)          # seconds back from now: records that started since then
NODE = Param("node", many=True)

STATS = Verb("stats")
NODES = Verb("nodes")
QUERY = Verb("query", Param("q"), LAST, NODE, Param("min_degree", float, default=0.0), Param("top", int))
BOTTLENECKS = Verb("bottlenecks", LAST, NODE, Param("top", int))
RANK = Verb("rank", Param("app"))
REGIONS = Verb("regions", LAST, NODE, Param("metric", many=True))
TASKS = Verb("tasks", Param("app"))
SAMPLES = Verb("samples", Param("metric", many=True), Param("scope"))
BBV_TARGETS = Verb("bbv-targets")
BBV = Verb("bbv", Param("target"), Param("kind"))
MODELS = Verb("models", Param("scope"))
MODEL = Verb("model", Param("scope"), Param("model_id", int), Param("format", default="json"))
ANOMALIES = Verb("anomalies", Param("scope"), Param("open", int, default=0), Param("limit", int, default=200))

VERBS = {v.path: v for v in (STATS, NODES, QUERY, BOTTLENECKS, RANK, REGIONS, TASKS, SAMPLES, BBV_TARGETS, BBV,
                             MODELS, MODEL, ANOMALIES)}

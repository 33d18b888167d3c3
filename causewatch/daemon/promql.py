"""The PromQL subset `/api/v1/query_range` answers (docs/queries.md), parsed into a range question's
parts; anything else is refused naming what is not supported.

    expr     := AGG [by (labels)] "(" inner ")" [by (labels)] | inner
    inner    := FN_over_time "(" selector "[" duration "]" ")" | selector
    selector := name ["{" matchers "}"] | "{" matchers "}"

AGG: sum, avg, min, max, count; FN: avg, min, max, sum, count, last. A bare selector is each series'
newest sample in the 5 minutes before each point, as Prometheus' lookback. An instant query may also be
a number or arithmetic of numbers (`1+1`, Grafana's test of a data source): a scalar.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import namedtuple

from causewatch.daemon.rangeq import AGGREGATIONS, FUNCTIONS
from causewatch.errors import InputError

LOOKBACK_SECONDS = 300.0
LABEL_NAMES = {"__name__": "metric", "node": "node", "scope": "scope"}   # Prometheus' name: ours
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_TOKEN = re.compile(r"""\s*(?:(?P<dur>\d+(?:\.\d+)?(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)
    |(?P<num>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)
    |(?P<name>[A-Za-z_:][A-Za-z0-9_:.]*)
    |(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){}\[\],@]))""", re.X)

Parsed = namedtuple("Parsed", "matchers window fn agg by")


def duration(text: str) -> float:
    """Seconds of a Prometheus duration ("90s", "1h30m", "500ms") or a plain number of seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|[smhdwy])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise InputError(f"{text!r}: not a duration (e.g. 30s, 5m, 1h30m) nor a number of seconds")
    return sum(float(n) * UNITS[u] for n, u in parts)


def timestamp(text: str, name: str) -> float:
    """Seconds since the epoch of a Unix time or an RFC 3339 one, as Prometheus' API takes both."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"{name}: {text!r} is neither a Unix time nor an RFC 3339 one") from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos:].strip() == "":
                break
            raise InputError(f"unsupported PromQL: unexpected {text[pos:pos + 10]!r} at character {pos}")
        out.append((m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        self.tokens, self.i = _tokens(text), 0

    def peek(self, ahead: int = 0):
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else ("end", "", -1)

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        kind_, text, pos = self.peek()
        if (value is not None and text != value) or (kind is not None and kind_ != kind):
            wanted = repr(value) if value is not None else f"a {kind}"
            got = "the end" if kind_ == "end" else f"{text!r} at character {pos}"
            raise InputError(f"unsupported PromQL: expected {wanted}, got {got}")
        self.i += 1
        return text

    def expr(self) -> Parsed:
        kind, text, _ = self.peek()
        if kind == "name" and text in AGGREGATIONS and self.peek(1)[1] in ("(", "by", "without"):
            self.take()
            by = self.by()
            self.take("(")
            inner = self.inner()
            self.take(")")
            by = by if by is not None else self.by()
            return inner._replace(agg=text, by=tuple(by or ()))
        return self.inner()

    def by(self) -> list[str] | None:
        kind, text, _ = self.peek()
        if text == "without":
            raise InputError("unsupported PromQL: without (...); group with by (...)")
        if text != "by":
            return None
        self.take()
        self.take("(")
        labels = []
        while self.peek()[1] != ")":
            labels.append(_label(self.take(kind="name")))
            if self.peek()[1] == ",":
                self.take()
        self.take(")")
        return labels

    def inner(self) -> Parsed:
        kind, text, pos = self.peek()
        if kind == "name" and self.peek(1)[1] == "(":
            fn = text.removesuffix("_over_time")
            if not text.endswith("_over_time") or fn not in FUNCTIONS:
                raise InputError(f"unsupported PromQL: function {text}() (supported: "
                                 f"{', '.join(f + '_over_time' for f in FUNCTIONS)}; aggregations "
                                 f"{', '.join(AGGREGATIONS)})")
            self.take()
            self.take("(")
            matchers = self.selector()
            self.take("[")
            window = duration(self.take(kind="dur"))
            self.take("]")
            self.take(")")
            return Parsed(matchers, window, fn, None, ())
        return Parsed(self.selector(), LOOKBACK_SECONDS, "last", None, ())

    def selector(self) -> list[tuple[str, str, str]]:
        matchers = []
        if self.peek()[0] == "name":
            matchers.append(("metric", "=", self.take()))
        if self.peek()[1] == "{":
            self.take()
            while self.peek()[1] != "}":
                label = _label(self.take(kind="name"))
                op = self.take(kind="op")
                if op not in ("=", "!=", "=~", "!~"):
                    raise InputError(f"unsupported PromQL: matcher operator {op!r}")
                matchers.append((label, op, _unquote(self.take(kind="str"))))
                if self.peek()[1] == ",":
                    self.take()
            self.take("}")
        if not matchers:
            raise InputError("unsupported PromQL: expected a metric name or {label matchers}, got "
                             f"{self.peek()[1] or 'the end'!r}")
        return matchers


def _label(name: str) -> str:
    if name not in LABEL_NAMES:
        raise InputError(f"unsupported PromQL: label {name!r} (series carry {', '.join(LABEL_NAMES)})")
    return LABEL_NAMES[name]


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


class _Number(_Parser):
    """Arithmetic of numbers: total := product (('+' | '-') product)*; product := unary (('*' | '/' | '%')
    unary)*; unary := ('-' | '+') unary | number | '(' total ')'."""

    def total(self) -> float:
        value = self.product()
        while self.peek()[1] in ("+", "-"):
            value = value + self.product() if self.take() == "+" else value - self.product()
        return value

    def product(self) -> float:
        value = self.unary()
        while self.peek()[1] in ("*", "/", "%"):
            op, right = self.take(), self.unary()
            value = value * right if op == "*" else _divide(value, right, op)
        return value

    def unary(self) -> float:
        kind, text, _ = self.peek()
        if text in ("-", "+"):
            self.take()
            return -self.unary() if text == "-" else self.unary()
        if text == "(":
            self.take()
            value = self.total()
            self.take(")")
            return value
        return float(self.take(kind="num"))


def _divide(a: float, b: float, op: str) -> float:
    """Go's float division and math.Mod, as Prometheus': by zero is ±Inf or NaN, not an error."""
    if b == 0:
        return float("nan") if op == "%" or a == 0 or a != a else math.copysign(float("inf"), a)
    return a / b if op == "/" else math.fmod(a, b)


def scalar(text: str) -> float | None:
    """The value of an expression of numbers alone, None for any other expression."""
    try:
        tokens = _tokens(text or "")
    except InputError:
        return None
    if not tokens or any(kind not in ("num", "op") for kind, _, _ in tokens):
        return None
    p = _Number(text)
    try:
        value = p.total()
    except (InputError, ValueError):
        return None
    return value if p.peek()[0] == "end" else None


def selector(text: str) -> list[tuple[str, str, str]]:
    """The matchers of a series selector alone (a `match[]` of the series and label APIs)."""
    p = _Parser(text or "")
    matchers = p.selector()
    kind, rest, pos = p.peek()
    if kind != "end":
        raise InputError(f"match[]: {text!r} is not a series selector ({rest!r} at character {pos})")
    return matchers


def parse(text: str) -> Parsed:
    """The question's parts of a PromQL expression of the subset; an InputError names what is not."""
    if not text or not text.strip():
        raise InputError("query: give a PromQL expression, e.g. avg by (node) (avg_over_time(cpu[5m]))")
    p = _Parser(text)
    parsed = p.expr()
    kind, rest, pos = p.peek()
    if kind != "end":
        raise InputError(f"unsupported PromQL: {rest!r} at character {pos} (binary operators, offset, @ and "
                         "subqueries are not supported)")
    return parsed

"""PERFQL (Statement := Expr | Statement OR Expr; Expr := Term | Expr AND Term; Term := (METRIC is
F_Expr)) parsed and evaluated on a region-summary DataFrame, matching regions ranked by degree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from causewatch.analytics.fuzzy import linguistic
from causewatch.analytics.fuzzy.linguistic import ExpressionError, TokenStream
from causewatch.analytics.fuzzy.score import DEGREE_EPS
from causewatch.analytics.fuzzy.summaries import KEYS, metric_name
from causewatch.analytics.fuzzy.terms import TermSet, default_terms

PerfQLError = ExpressionError
_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}


# Metric AST: ("name", name, column) | ("num", value) | ("neg", node) | (op, left, right)

def _parse_sum(ts: TokenStream):
    node = _parse_product(ts)
    while ts.peek().kind == "op" and ts.peek().text in "+-":
        node = (ts.next().text, node, _parse_product(ts))
    return node


def _parse_product(ts: TokenStream):
    node = _parse_unary(ts)
    while ts.peek().kind == "op" and ts.peek().text in "*/":
        node = (ts.next().text, node, _parse_unary(ts))
    return node


def _parse_unary(ts: TokenStream):
    tok = ts.peek()
    if tok.kind == "op" and tok.text == "-":
        ts.next()
        return ("neg", ts.nest(_parse_unary))
    if tok.kind == "number":
        ts.next()
        return ("num", float(tok.text))
    if tok.kind == "quoted" or (tok.kind == "name" and tok.keyword() not in ("is", "and", "or")):
        ts.next()
        return ("name", metric_name(tok.text), tok.column)
    if tok.kind == "op" and tok.text == "(":
        return ts.parenthesised(_parse_sum, "')' or an arithmetic operator")
    ts.fail("a metric name, a number or '('")


def canonical(node) -> str:
    """A metric expression as text with names lower-cased and full parentheses (for matching)."""
    kind = node[0]
    if kind == "name":
        return node[1].lower()
    if kind == "num":
        return repr(node[1])
    if kind == "neg":
        return f"(-{canonical(node[1])})"
    return f"({canonical(node[1])}{kind}{canonical(node[2])})"


def parse_metric(text: str):
    return linguistic.parse_whole(text, _parse_sum, "an arithmetic operator or end of input")


def metric_names(node) -> list[tuple[str, int]]:
    kind = node[0]
    if kind == "name":
        return [(node[1], node[2])]
    if kind == "num":
        return []
    return [n for child in node[1:] for n in metric_names(child)]


@dataclass(frozen=True)
class Condition:
    """One Term: (METRIC is F_Expr)."""
    metric: tuple        # metric AST
    metric_text: str     # as written
    column: int          # where the metric starts
    fexpr: tuple         # linguistic AST


def _parse_condition(ts: TokenStream) -> Condition:
    ts.expect_op("(", "'(' to start a term (METRIC is F_Expr)")
    start = ts.peek()
    metric = _parse_sum(ts)
    text = ts.text[start.column - 1:ts.peek().column - 1].strip()
    if not ts.accept_keyword("is"):
        ts.fail("'is' or an arithmetic operator")
    fexpr = linguistic.parse_expr(ts)
    ts.expect_op(")", "')' or AND/OR")
    return Condition(metric, text, start.column, fexpr)


def parse(text: str):
    """Parse a PERFQL statement; raises ExpressionError naming the column and what was expected."""
    return linguistic.parse_whole(text, _parse_statement, "AND, OR or end of input")


def _parse_statement(ts: TokenStream):
    return linguistic.chain(ts, "or", _parse_expr)


def _parse_expr(ts: TokenStream):
    return linguistic.chain(ts, "and", _parse_condition)


def conditions(node) -> list[Condition]:
    return [node] if isinstance(node, Condition) else conditions(node[1]) + conditions(node[2])


def _values(node, df: pd.DataFrame, columns: dict[str, str], text: str) -> np.ndarray:
    kind = node[0]
    if kind == "num":
        return np.full(len(df), node[1])
    if kind == "name":
        col = columns.get(node[1].lower())
        if col is None:
            raise ExpressionError(text, node[2], f"a metric of the region summaries ({', '.join(sorted(columns))})",
                                  repr(node[1]))
        return df[col].to_numpy(float)
    if kind == "neg":
        return -_values(node[1], df, columns, text)
    return _OPS[kind](_values(node[1], df, columns, text), _values(node[2], df, columns, text))


def metric_array(node, df: pd.DataFrame, text: str) -> np.ndarray:
    """Values of a metric expression (AST of parse_metric) on every row; NaN where there is none
    (a missing metric value, a division by zero, an overflow). `text` is quoted by errors."""
    columns = {c.lower(): c for c in df.columns if c not in KEYS}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        v = _values(node, df, columns, text)
    return np.where(np.isfinite(v), v, np.nan)


class Query:
    """A parsed PERFQL statement bound to term sets; evaluate it on a region-summary DataFrame."""

    def __init__(self, text: str, termsets: Mapping[str, TermSet] | None = None, mode: str = "compatible"):
        self.text, self.mode = text, mode
        self.termsets = dict(default_terms() if termsets is None else termsets)
        self.tree = parse(text)
        self._by_expr = {canonical(parse_metric(ts.expr)): ts for ts in self.termsets.values()}
        self._by_name = {name.lower(): ts for name, ts in self.termsets.items()}
        # Compile every condition's metric and fuzzy set once; rows are then pure numpy.
        self._compiled = {id(c): self._compile(c) for c in conditions(self.tree)}

    def _termset(self, cond: Condition) -> TermSet | None:
        m = cond.metric
        if m[0] == "name" and m[1].lower() in self._by_name:
            return self._by_name[m[1].lower()]
        return self._by_expr.get(canonical(m))

    def _metric_tree(self, cond: Condition):
        """A lone name that names a term set stands for that set's expression."""
        ts = self._termset(cond)
        if cond.metric[0] == "name" and ts is not None and canonical(parse_metric(ts.expr)) != canonical(cond.metric):
            return parse_metric(ts.expr)
        return cond.metric

    def _compile(self, cond: Condition):
        own = self._termset(cond)

        def resolve(name: str, column: int):
            if own is not None and name in own.terms:
                return own.terms[name]
            owners = [ts for ts in self.termsets.values() if name in ts.terms]
            if len(owners) == 1:
                return owners[0].terms[name]
            if owners:
                sets = ", ".join(ts.metric for ts in owners)
                raise ExpressionError(self.text, cond.column, f"a metric with a term set of its own, since "
                                      f"several define {name!r} ({sets})", repr(cond.metric_text))
            known = sorted(own.terms) if own else sorted({t for ts in self.termsets.values() for t in ts.terms})
            raise ExpressionError(self.text, column, f"a term of {', '.join(known)}", repr(name))

        return self._metric_tree(cond), linguistic.fuzzy_set(cond.fexpr, resolve, self.mode)

    def required_metrics(self) -> set[str]:
        """Metric names the query may read (to build only those columns)."""
        trees = [t for c in conditions(self.tree) for t in (c.metric, self._compiled[id(c)][0])]
        return {n for t in trees for n, _ in metric_names(t)}

    def metric_values(self, cond: Condition, df: pd.DataFrame) -> np.ndarray:
        tree = self._compiled[id(cond)][0]
        have = {c.lower() for c in df.columns}
        if tree is not cond.metric and not all(n.lower() in have for n, _ in metric_names(tree)) \
                and cond.metric[1].lower() in have:
            tree = cond.metric  # the set's inputs are not recorded but the metric itself is (e.g. cpi)
        return metric_array(tree, df, self.text)

    def degrees(self, df: pd.DataFrame) -> np.ndarray:
        def walk(node):
            if isinstance(node, Condition):
                fs = self._compiled[id(node)][1]
                return np.nan_to_num(fs(self.metric_values(node, df)), nan=0.0)
            op = np.minimum if node[0] == "and" else np.maximum
            return op(walk(node[1]), walk(node[2]))
        return walk(self.tree)

    def evaluate(self, df: pd.DataFrame, min_degree: float = 0.0, top: int | None = None) -> pd.DataFrame:
        """Rows of `df` with degree > 0 (beyond rounding dust) and >= min_degree, best first (ties in
        key order): the keys, the value of every metric of the query (named as written), the degree."""
        if not len(df):  # nothing recorded: nothing matches (and no column to check names against)
            return pd.DataFrame(columns=[*KEYS, *(c.metric_text for c in conditions(self.tree)), "degree"])
        deg = self.degrees(df)
        keep = np.flatnonzero((deg > DEGREE_EPS) & (deg >= min_degree))
        rows = _ranked(df, keep, deg[keep], top)
        sub = df.iloc[rows]
        out = sub[[k for k in KEYS if k in df]].reset_index(drop=True)
        for cond in conditions(self.tree):
            out[cond.metric_text] = self.metric_values(cond, sub)
        out["degree"] = deg[rows]
        return out


def _ranked(df: pd.DataFrame, rows: np.ndarray, degree: np.ndarray, top: int | None) -> np.ndarray:
    """`rows` best degree first, ties in key order, cut to `top`. Arrow's sort and top-k selection
    keep this cheap when half a million rows tie at degree 1."""
    keys = [k for k in KEYS if k in df]
    table = pa.table({"degree": degree, **{k: pa.array(df[k].iloc[rows], pa.string()) for k in keys}})
    sort_keys = [("degree", "descending"), *[(k, "ascending") for k in keys]]
    if top is not None and top < len(rows):
        order = pc.select_k_unstable(table, k=top, sort_keys=sort_keys)
    else:
        order = pc.sort_indices(table, sort_keys=sort_keys)
    return rows[order.to_numpy()]

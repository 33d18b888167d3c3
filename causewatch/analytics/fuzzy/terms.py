"""Performance characteristic terms per metric: TOML term sets (defaults in default_terms.toml) with
optional bottleneck sections, and a scikit-learn style learner of terms from observed values."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from causewatch.analytics.fuzzy.hedges import HEDGES
from causewatch.analytics.fuzzy.membership import Membership, MembershipError

RESERVED = {*HEDGES, "and", "or", "is"}


class TermsError(ValueError):
    """A bad term-set definition; the message names the TOML key and what was expected."""


@dataclass(frozen=True)
class Bottleneck:
    """Crisp threshold plus fuzzy severity terms (least to most severe) and a negligible band."""
    threshold: float
    severity: dict[str, Membership]
    negligible: Membership | None = None


@dataclass(frozen=True)
class TermSet:
    metric: str
    terms: dict[str, Membership]
    expr: str = ""                # metric expression the terms describe; empty = the metric itself
    bottleneck: Bottleneck | None = None
    description: str = ""
    levels: dict[str, float] = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "expr", self.expr or self.metric)
        sev = self.bottleneck.severity if self.bottleneck else {}
        # Severity level of each severity term: k/K for the k-th of K (the most severe is 1).
        object.__setattr__(self, "levels", {n: (k + 1) / len(sev) for k, n in enumerate(sev)})


def _membership(spec, where: str) -> Membership:
    if not isinstance(spec, dict) or "shape" not in spec or "params" not in spec:
        raise TermsError(f"{where}: expected a table {{shape = \"...\", params = [...]}}, got {spec!r}")
    try:
        return Membership(spec["shape"], tuple(spec["params"]))
    except (MembershipError, TypeError, ValueError) as e:
        raise TermsError(f"{where}: {e}") from None


def _terms(table, where: str) -> dict[str, Membership]:
    if not isinstance(table, dict) or not table:
        raise TermsError(f"{where}: expected a table of terms, got {table!r}")
    out = {}
    for name, spec in table.items():
        if name.lower() in RESERVED:
            raise TermsError(f"{where}.{name}: a term may not be named like a hedge or keyword")
        out[name.lower()] = _membership(spec, f"{where}.{name}")
    return out


def _termset(metric: str, t: dict) -> TermSet:
    where = f"metrics.{metric}"
    bottleneck = None
    if "bottleneck" in t:
        b = t["bottleneck"]
        if "threshold" not in b or "severity" not in b:
            raise TermsError(f"{where}.bottleneck: expected keys threshold and severity")
        neg = b.get("negligible")
        bottleneck = Bottleneck(float(b["threshold"]), _terms(b["severity"], f"{where}.bottleneck.severity"),
                                None if neg is None else _membership(neg, f"{where}.bottleneck.negligible"))
    return TermSet(metric, _terms(t.get("terms"), f"{where}.terms"), t.get("expr", ""), bottleneck,
                   t.get("description", ""))


def parse_terms(text: str, where: str = "<terms>") -> dict[str, TermSet]:
    """Term sets from TOML text ([metrics.<name>] tables)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TermsError(f"{where}: {e}") from None
    metrics = doc.get("metrics")
    if not isinstance(metrics, dict):
        raise TermsError(f"{where}: expected [metrics.<name>] tables")
    try:
        return {name: _termset(name, t) for name, t in metrics.items()}
    except TermsError as e:
        raise TermsError(f"{where}: {e}") from None


def default_terms() -> dict[str, TermSet]:
    text = resources.files("causewatch.analytics.fuzzy").joinpath("default_terms.toml").read_text()
    return parse_terms(text, "default_terms.toml")


def load_terms(path: str | Path | None = None) -> dict[str, TermSet]:
    """The default term sets, with the sets of `path` (if given) added or replacing by metric name."""
    sets = default_terms()
    if path is not None:
        sets.update(parse_terms(Path(path).read_text(), str(path)))
    return sets


def _fmt(m: Membership) -> str:
    return f'{{shape = "{m.shape}", params = [{", ".join(repr(p) for p in m.params)}]}}'


def dump_terms(sets: dict[str, TermSet]) -> str:
    """TOML text that parse_terms reads back to the same sets."""
    lines = []
    for name, ts in sets.items():
        lines += [f"[metrics.{name}]", f"expr = {json.dumps(ts.expr)}", f"description = {json.dumps(ts.description)}"]
        lines += [f"terms.{t} = {_fmt(m)}" for t, m in ts.terms.items()]
        if ts.bottleneck:
            b = ts.bottleneck
            lines += [f"bottleneck.threshold = {b.threshold!r}"]
            lines += [f"bottleneck.severity.{t} = {_fmt(m)}" for t, m in b.severity.items()]
            lines += [f"bottleneck.negligible = {_fmt(b.negligible)}"] if b.negligible else []
        lines.append("")
    return "\n".join(lines)


_NAMES = {2: ["low", "high"], 3: ["low", "medium", "high"], 5: ["lowest", "low", "medium", "high", "highest"]}


class TermLearner:
    """Learn terms per metric from observed values: a Ruspini partition (degrees sum to 1) whose term
    peaks sit at evenly spaced quantiles of the data, shoulders at both ends.

    fit(X) takes a DataFrame (one column per metric) or a 1-D array (metric "x"); learned term sets
    are in `terms_` (metric -> TermSet) and the term peaks in `centers_`.
    """

    def __init__(self, n_terms: int = 3, names: list[str] | None = None, quantiles: tuple = (0.05, 0.95)):
        self.n_terms = n_terms
        self.names = names
        self.quantiles = quantiles

    def _centers(self, col: np.ndarray) -> np.ndarray:
        col = col[np.isfinite(col)]
        if col.size == 0:
            raise TermsError("cannot learn terms from a column with no finite values")
        c = np.quantile(col, np.linspace(*self.quantiles, self.n_terms))
        if np.any(np.diff(c) <= 0):  # ties in the quantiles: fall back to the observed range
            lo, hi = col.min(), col.max()
            c = np.linspace(lo, hi if hi > lo else lo + 1.0, self.n_terms)
        return c

    def fit(self, X, y=None) -> "TermLearner":
        names = self.names or _NAMES.get(self.n_terms) or [f"term_{k + 1}" for k in range(self.n_terms)]
        if self.n_terms < 2 or len(names) != self.n_terms:
            raise TermsError(f"need n_terms >= 2 and one name per term, got {self.n_terms} and {names}")
        df = X if isinstance(X, pd.DataFrame) else pd.DataFrame({"x": np.asarray(X, float).ravel()})
        self.centers_, self.terms_ = {}, {}
        for metric in df.columns:
            c = self._centers(df[metric].to_numpy(float))
            shapes = [Membership("linear", (c[1], c[0]))]
            shapes += [Membership("triangle", tuple(c[k - 1:k + 2])) for k in range(1, self.n_terms - 1)]
            shapes.append(Membership("linear", (c[-2], c[-1])))
            self.centers_[metric] = c
            self.terms_[metric] = TermSet(str(metric), dict(zip(names, shapes)))
        return self

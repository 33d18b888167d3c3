"""Root-cause ranking: `causewatch diagnose`'s ranking (analytics.rca.rank_causes) against five
baselines written here from their papers' descriptions, all on the same cases in one run.

Baselines: a robust z-score ranking (BARO, Pham et al. FSE 2024: each column's |x - median| / IQR of the
normal rows, a unit's largest); plain max-|z| (mean and standard deviation); ε-Diagnosis (Shan et al.
WWW 2019: a two-sample energy-distance permutation test per column, normal against anomalous rows, a unit
ranked by its smallest p-value, then statistic); PetShop's anomaly traversal (Hardt et al. CLeaR 2024: from
the symptom along the call graph into anomalous nodes, by robust z of the symptom's metric, the causes
being those none of whose callees is anomalous, ranked by z, the rest after) and its ranked correlation
(units by |Spearman correlation| of their symptom-kind column with the symptom over the last normal rows
and the incident). A zero scale is floored at 1e-3 of the median. Cases: bench/rca_cases.py (PetShop,
the first planted graph and network families), bench/rca_graph.py and bench/rca_sem.py (the others).

Prints AC@1, AC@3, Avg@5 per subset (ties count as a random order among themselves) and seconds per case.

    .venv/bin/python bench/rca.py                       # PetShop train + 7 x 40 planted graph, 140 graph-less
    .venv/bin/python bench/rca.py --seeds 40 --first 20 --only graph-   # other seeds, some subsets
    .venv/bin/python bench/rca.py --seeds 10 --data PATH/TO/petshop
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import rca_cases
import rca_graph
import rca_sem

from causewatch.analytics.rca import CallGraph, column_kind, rank_causes

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "rca" / "petshop"
FLOOR = 1e-3


def _values(df, col):
    return pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)


def _z_columns(case, center, spread):
    """column -> the largest |z| of its incident rows against the normal rows' center and spread."""
    out = {}
    for col in case.baseline.columns:
        b, i = _values(case.baseline, col), _values(case.incident, col)
        b, i = b[np.isfinite(b)], i[np.isfinite(i)]
        if len(b) < 3 or not len(i):
            continue
        c = center(b)
        s = max(spread(b), FLOOR * abs(c), 1e-12)
        out[col] = float(np.max(np.abs(i - c)) / s)
    return out


def _by_unit(case, per_column):
    return {u: max([per_column[c] for c in cols if c in per_column], default=0.0) for u, cols in case.units.items()}


def baro(case):
    iqr = lambda b: float(np.subtract(*np.percentile(b, [75, 25])))   # noqa: E731
    return _by_unit(case, _z_columns(case, np.median, iqr))


def max_z(case):
    return _by_unit(case, _z_columns(case, np.mean, np.std))


def _energy(x, y):
    return 2 * np.abs(x[:, None] - y[None, :]).mean() - np.abs(x[:, None] - x[None, :]).mean() \
        - np.abs(y[:, None] - y[None, :]).mean()


def epsilon_diagnosis(case, perms=49, normal_rows=60):
    rng = np.random.default_rng(0)
    per_column = {}
    for col in case.baseline.columns:
        b, i = _values(case.baseline, col), _values(case.incident, col)
        b, i = b[np.isfinite(b)][-normal_rows:], i[np.isfinite(i)]
        if len(b) < 3 or len(i) < 2 or np.std(b) == 0 and np.std(i) == 0:
            continue
        both = np.concatenate([b, i]) / (np.std(b) or 1.0)
        stat = _energy(both[:len(b)], both[len(b):])
        hits = sum(_energy(p[:len(b)], p[len(b):]) >= stat for p in (rng.permutation(both) for _ in range(perms)))
        per_column[col] = (1 - (hits + 1) / (perms + 1)) + 1e-6 * np.tanh(stat)
    return _by_unit(case, per_column)


def _target_kind_columns(case):
    unit = next((u for u, cols in case.units.items() if case.target in cols), None)
    kind = column_kind(case.target, unit or case.target)
    return unit, {u: c for u in case.units for c in case.units[u] if column_kind(c, u) == kind}


def traversal(case, threshold=3.0):
    if case.target is None or case.edges is None:
        return baro(case)
    start, cols = _target_kind_columns(case)
    z = baro(rca_cases.Case(case.name, case.subset, case.baseline, case.incident, {u: [c] for u, c in cols.items()},
                            case.target, case.edges, case.truth))
    callees = defaultdict(set)
    for a, b in case.edges:
        callees[a].add(b)
    anomalous = {u for u, v in z.items() if v >= threshold}
    seen, todo, found = {start}, [start], set()
    while todo:
        cur = todo.pop()
        nxt = [c for c in callees[cur] if c in anomalous]
        if not nxt and cur in anomalous and cur != start:
            found.add(cur)
        for c in nxt:
            if c not in seen:
                seen.add(c)
                todo.append(c)
    top = max(z.values(), default=0.0) + 1
    return {u: (top + z.get(u, 0.0)) if u in found else z.get(u, 0.0) for u in case.units}


def ranked_correlation(case, normal_rows=24):
    if case.target is None:
        return baro(case)
    _, cols = _target_kind_columns(case)
    window = pd.concat([case.baseline.tail(normal_rows), case.incident]).apply(pd.to_numeric, errors="coerce")
    y = window[case.target].rank()
    reach = CallGraph(case.edges).descendants(_target_kind_columns(case)[0]) if case.edges else set(case.units)
    out = {}
    for u in case.units:
        c = cols.get(u)
        r = window[c].rank().corr(y) if c is not None and c != case.target else np.nan
        out[u] = (abs(r) if np.isfinite(r) else 0.0) + (1.0 if u in reach else 0.0)
    return out


def ours(case):
    graph = CallGraph(case.edges) if case.edges else None
    return {c.unit: c.score for c in rank_causes(case.baseline, case.incident, case.units, case.target, graph)}


METHODS = {"ours": ours, "BARO": baro, "max-|z|": max_z, "ε-Diagnosis": epsilon_diagnosis,
           "traversal": traversal, "ranked-corr": ranked_correlation}


def hit_rates(scores: dict[str, float], truth: str, ks=range(1, 6)) -> list[float]:
    """AC@k for each k with ties in a random order: P(truth among the first k)."""
    mine = scores.get(truth)
    if mine is None:
        return [0.0 for _ in ks]
    better = sum(v > mine for v in scores.values())
    tied = sum(v == mine for v in scores.values())
    return [min(1.0, max(0.0, (k - better) / tied)) for k in ks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="the PetShop folder (default: beside the checkout)")
    parser.add_argument("--seeds", type=int, default=20, help="planted cases per family and scenario")
    parser.add_argument("--first", type=int, default=0, help="the first planted seed (default 0)")
    parser.add_argument("--only", metavar="PREFIX", default="", help="the subsets whose name starts so")
    args = parser.parse_args()
    seeds, first = args.seeds, args.first
    cases = (rca_cases.petshop_cases(args.data) + rca_cases.planted_graph_cases(args.data, seeds, first)
             + rca_graph.graph_family_cases(args.data, seeds, first) if args.data.is_dir() else [])
    cases += rca_cases.planted_sem_cases(2 * seeds, 2 * first) + rca_sem.sem_family_cases(seeds, first)
    cases = [c for c in cases if c.subset.startswith(args.only)]
    results = defaultdict(list)
    for case in cases:
        for name, method in METHODS.items():
            t0 = time.perf_counter()
            scores = method(case)
            results[case.subset, name].append((hit_rates(scores, case.truth), time.perf_counter() - t0))
    print(f"{'subset':34} {'method':12} {'n':>3} {'AC@1':>6} {'AC@3':>6} {'Avg@5':>6} {'s/case':>7}")
    for subset in dict.fromkeys(c.subset for c in cases):
        for name in METHODS:
            rows = results[subset, name]
            ac = np.mean([r[0] for r in rows], axis=0)
            print(f"{subset:34} {name:12} {len(rows):3d} {ac[0]:6.3f} {ac[2]:6.3f} {ac.mean():6.3f} "
                  f"{np.mean([r[1] for r in rows]):7.3f}")


if __name__ == "__main__":
    main()

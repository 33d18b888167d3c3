"""Planted faults on PetShop's call graphs, over its recorded normal rows (their noise, gaps and flat
columns as they are): a 5-row window cut from the normal period, the rows before it the baseline.

* graph-kinds: latency added at the node and inherited by its callers, or its availability falling and
  theirs with it; the node a leaf or an inner node, the symptom PetSite's column of that kind.
* graph-cross: the node's availability falls and its callers show it as rising latency (retries,
  timeouts) while their own availability holds: the symptom is PetSite's latency, the fault another kind.
* graph-noisy: a latency or availability fault among innocent changes: 1-3 neighbours shifted already
  from the window's first row or moving inside it without their callers following, another traffic
  level (every requests column scaled, latencies a little), 5 % of the incident's cells missing, and the
  fault starting at the window's first, second or third row.
"""

from __future__ import annotations

import zlib

import numpy as np
import rca_cases

LATENCY, AVAILABILITY, RETRIES = "latency", "availability", "retries"   # what a fault does at the callers


def _stats(units, node, kind):
    return [c for c in units.get(node, []) if f"_{kind}_" in c]


def _usable(normal, window, units, node, kind) -> bool:
    """A fault of `kind` at `node` can show: its columns have data and, for availability, room to fall."""
    col = f"{node}_{'latency' if kind == LATENCY else 'availability'}_Average"
    if col not in window.columns or window[col].isna().any() or normal[col].notna().mean() < 0.5:
        return False
    return kind == LATENCY or normal[col].median() >= 90


def _shares(edges, node, rng) -> dict[str, float]:
    """node and every unit that reaches it -> the share of the fault it inherits: each hop from a callee
    to its caller keeps a random 30-100 % of it (the share of the caller's requests that make the call)."""
    callers: dict[str, list[str]] = {}
    for a, b in edges:
        callers.setdefault(b, []).append(a)
    share, todo = {node: 1.0}, [node]
    while todo:
        cur = todo.pop(0)
        for caller in sorted(callers.get(cur, ())):
            if caller not in share:
                share[caller] = share[cur] * rng.uniform(0.3, 1.0)
                todo.append(caller)
    return share


def _propagate(out, units, share, node, kind, strength, rows, rng):
    """Add the fault at `node` and what its callers inherit: `strength` is seconds of latency, or points
    of availability at the node and for retries seconds of latency at its callers."""
    for n, s in share.items():
        own = n == node
        if kind == LATENCY or (kind == RETRIES and not own):
            add = s * strength[kind == RETRIES]
            for col in _stats(units, n, "latency"):
                out.loc[rows, col] = out.loc[rows, col] + add * rng.uniform(0.7, 1.3, len(rows))
        if kind == AVAILABILITY or (kind == RETRIES and own):
            for col in _stats(units, n, "availability"):
                drop = s * strength[0] * rng.uniform(0.7, 1.3, len(rows))
                out.loc[rows, col] = np.clip(out.loc[rows, col] - drop, 0, 100)


def spread(values) -> float:
    """A column's normal spread: the IQR, else (a mostly flat column) the mean absolute deviation."""
    v = values[np.isfinite(values)]
    q1, q3 = np.percentile(v, [25, 75])
    return max((q3 - q1) / 1.349, 1.25 * float(np.mean(np.abs(v - np.median(v)))), 1e-3 * abs(np.median(v)), 1e-9)


def _strength(base, node, kind, share, target, rng) -> tuple[float, float]:
    """(the fault at the node, what a retry costs its callers): large enough to show at the node and at
    the symptom, 4-20 of the symptom's spreads there."""
    at_target = rng.uniform(4, 20) * spread(base[target].to_numpy(dtype=float)) / share["PetSite"]
    if kind == LATENCY:
        own = rng.uniform(2, 10) * float(np.nanmedian(base[f"{node}_latency_Average"]))
        return max(own, at_target), 0.0
    if kind == AVAILABILITY:
        return min(100.0, max(rng.uniform(3, 15), at_target)), 0.0
    return rng.uniform(3, 30), at_target


def _neighbours(out, units, nodes, truth, onset, rng) -> list[str]:
    """1-3 innocent units changed: a latency shift standing from the first row, a latency change inside
    the window that their callers do not follow, or a requests surge."""
    innocent = [n for n in nodes if n != truth and n != "PetSite" and _stats(units, n, "latency")]
    picked = list(rng.choice(innocent, size=int(rng.integers(1, 4)), replace=False))
    for n in picked:
        how = rng.integers(3)
        rows = out.index if how == 0 else out.index[max(onset, 1):]
        kind = "requests" if how == 2 else "latency"
        for col in _stats(units, n, kind):
            out.loc[rows, col] = out.loc[rows, col] * rng.uniform(1.5, 4.0)
    return picked


def _traffic(out, units, rng):
    factor = rng.uniform(0.6, 1.6)
    for n in units:
        for col in _stats(units, n, "requests"):
            out[col] = out[col] * factor
        for col in _stats(units, n, "latency"):
            out[col] = out[col] * (1 + 0.1 * (factor - 1))


def _holes(out, keep, rng, share=0.05):
    cols = [c for c in out.columns if c not in keep]
    values = out[cols].to_numpy(dtype=float)
    values[rng.random(values.shape) < share] = np.nan
    out[cols] = values


def _case(family, scenario, seed, normal, edges, nodes, units):
    rng = np.random.default_rng(zlib.crc32(f"{family}/{scenario}/{seed}".encode()))
    start = int(rng.integers(len(normal) * 2 // 3, len(normal) - 5))
    window, base = normal.iloc[start:start + 5].copy(), normal.iloc[:start - 12]
    kind = RETRIES if family == "graph-cross" else (LATENCY, AVAILABILITY)[seed % 2]
    leaf = rng.random() < 0.5 if family == "graph-noisy" else (seed // (1 if family == "graph-cross" else 2)) % 2 == 0
    callees = {a for a, _ in edges}
    usable = [n for n in nodes if n != "PetSite" and "PetSite" in rca_cases._ancestors(edges, n)
              and _usable(base, window, units, n, LATENCY if kind == LATENCY else AVAILABILITY)]
    usable = [n for n in usable if (n not in callees) == leaf] or usable
    node = usable[int(rng.integers(len(usable)))]
    onset = int(rng.choice([0, 1, 2, 2])) if family == "graph-noisy" else 2
    target = f"PetSite_{'availability' if kind == AVAILABILITY else 'latency'}_Average"
    share = _shares(edges, node, rng)
    strength = _strength(base, node, kind, share, target, rng)
    _propagate(window, units, share, node, kind, strength, window.index[onset:], rng)
    if family == "graph-noisy":
        _neighbours(window, units, nodes, node, onset, rng)
        _traffic(window, units, rng)
        _holes(window, {target}, rng)
    return rca_cases.Case(f"{family}/{scenario}/seed{seed}", f"{family}/{scenario}", base, window, units, target,
                          edges, node)


def graph_family_cases(root, seeds: int, first: int = 0) -> list[rca_cases.Case]:
    cases = []
    for scenario in ("low_traffic", "high_traffic"):
        normal = rca_cases.read_metrics(root / scenario / "noissue" / "metrics.csv")
        edges = rca_cases.read_edges(root / scenario / "graph.csv")
        nodes = sorted({n for e in edges for n in e})
        units = rca_cases._units(normal.columns, nodes)
        for family in ("graph-kinds", "graph-cross", "graph-noisy"):
            seeds_ = range(first, first + seeds)
            cases += [_case(family, scenario, seed, normal, edges, nodes, units) for seed in seeds_]
    return cases


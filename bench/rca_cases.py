"""The cases bench/rca.py ranks: PetShop's recorded train issues, read as the held-out evaluation hands
them to `causewatch diagnose`, and two planted families over many seeds.

* petshop/<scenario>: the recorded issues; temporal scenarios take low_traffic's normal rows.
* planted-graph/<scenario>: a window cut from the scenario's normal rows (the rows before it are the
  baseline), a random node with data given a latency or availability fault that reaches its callers
  along the call graph (each hop keeping a random 40-90 % of it, with noise), the symptom PetSite's.
* planted-sem: no graph, no target: a random linear network of 15 units with latency, requests and
  errors columns; the incident shifts one unit's own noise (its mechanism), which reaches the units
  downstream; the traffic level of every requests column differs between the windows by one factor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SCENARIOS = ("low_traffic", "high_traffic", "temporal_traffic1", "temporal_traffic2")


@dataclass
class Case:
    name: str
    subset: str
    baseline: pd.DataFrame
    incident: pd.DataFrame
    units: dict[str, list[str]]
    target: str | None
    edges: list[tuple[str, str]] | None
    truth: str


def read_metrics(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, header=[0, 1, 2], index_col=0)
    df.columns = ["_".join(c) for c in df.columns]
    df.index.name = "time"
    return df


def read_edges(path: Path) -> list[tuple[str, str]]:
    adj = pd.read_csv(path, index_col=0)
    return [(adj.index[i], adj.columns[j]) for i, j in zip(*np.nonzero(adj.to_numpy()))]


def _units(columns, nodes) -> dict[str, list[str]]:
    """node -> its columns, each column going to the longest node name it starts with."""
    out: dict[str, list[str]] = {n: [] for n in nodes}
    by_length = sorted(nodes, key=len, reverse=True)
    for col in columns:
        node = next((n for n in by_length if col.startswith(n + "_")), None)
        if node is not None:
            out[node].append(col)
    return out


def _aligned(baseline: pd.DataFrame, incident: pd.DataFrame, nodes) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    keep = [c for c in baseline.columns if any(c.startswith(n + "_") for n in nodes)]
    columns = list(dict.fromkeys(list(incident.columns) + keep))
    units = _units(columns, nodes)
    return baseline.reindex(columns=columns), incident.reindex(columns=columns), units


def petshop_cases(root: Path) -> list[Case]:
    cases = []
    for scenario in SCENARIOS:
        normal = root / scenario / "noissue" / "metrics.csv"
        base = read_metrics(normal if normal.exists() else root / "low_traffic" / "noissue" / "metrics.csv")
        edges = read_edges(root / scenario / "graph.csv")
        nodes = sorted({n for e in edges for n in e})
        for issue in sorted((root / scenario / "train").iterdir()):
            meta = json.loads((issue / "target.json").read_text())
            t = meta["target"]
            b, i, units = _aligned(base, read_metrics(issue / "metrics.csv"), nodes)
            cases.append(Case(f"{scenario}/{issue.name}", f"petshop/{scenario}", b, i, units,
                              f"{t['node']}_{t['metric']}_{t['agg']}", edges, meta["root_cause"]["node"]))
    return cases


def _ancestors(edges, node) -> dict[str, int]:
    """caller -> hops from `node`, over the call edges backwards."""
    callers: dict[str, set[str]] = {}
    for a, b in edges:
        callers.setdefault(b, set()).add(a)
    hops, todo = {node: 0}, [node]
    while todo:
        cur = todo.pop(0)
        for nxt in callers.get(cur, ()):
            if nxt not in hops:
                hops[nxt] = hops[cur] + 1
                todo.append(nxt)
    return hops


def _fault(window: pd.DataFrame, units, node, hops, kind, rng) -> pd.DataFrame:
    out = window.copy()
    rows = out.index[2:]
    strength = rng.uniform(3, 12) if kind == "latency" else rng.uniform(1, 8)
    keep = {node: 1.0}
    for n, h in sorted(hops.items(), key=lambda x: (x[1], x[0])):
        if h:
            keep[n] = keep.get(n, 1.0) * rng.uniform(0.4, 0.9) ** h
    for n, share in keep.items():
        for col in units.get(n, []):
            if kind == "latency" and "_latency_" in col:
                base = out.loc[rows, col]
                add = share * strength * np.nanmedian(window[col]) * rng.uniform(0.7, 1.3, len(rows))
                out.loc[rows, col] = base + np.nan_to_num(add)
            elif kind == "availability" and col.endswith("_availability_Average"):
                drop = share * strength * rng.uniform(0.7, 1.3, len(rows))
                out.loc[rows, col] = np.clip(out.loc[rows, col] - drop, 0, 100)
    return out


def planted_graph_cases(root: Path, seeds: int, first: int = 0) -> list[Case]:
    cases = []
    for scenario in ("low_traffic", "high_traffic"):
        normal = read_metrics(root / scenario / "noissue" / "metrics.csv")
        edges = read_edges(root / scenario / "graph.csv")
        nodes = sorted({n for e in edges for n in e})
        units = _units(normal.columns, nodes)
        for seed in range(first, first + seeds):
            rng = np.random.default_rng(seed)
            start = int(rng.integers(len(normal) * 2 // 3, len(normal) - 5))
            window, base = normal.iloc[start:start + 5], normal.iloc[:start - 12]
            kind = "latency" if seed % 2 == 0 else "availability"
            col = "_latency_Average" if kind == "latency" else "_availability_Average"
            usable = [n for n in nodes if n + col in window.columns and window[n + col].notna().all()
                      and "PetSite" in _ancestors(edges, n) and n != "PetSite"]
            node = usable[int(rng.integers(len(usable)))]
            incident = _fault(window, units, node, _ancestors(edges, node), kind, rng)
            cases.append(Case(f"{scenario}/seed{seed}", f"planted-graph/{scenario}", base, incident, units,
                              f"PetSite_{kind}_Average", edges, node))
    return cases


def _sem(rng, n_units=15):
    weights = np.triu(rng.uniform(0.3, 0.9, (n_units, n_units)) * (rng.random((n_units, n_units)) < 0.2), 1)
    return weights * rng.choice([-1, 1], weights.shape)


def _simulate(weights, rows, rng, shift=None):
    n = len(weights)
    noise = rng.normal(0, 1, (rows, n))
    if shift is not None:
        noise[:, shift[0]] += shift[1]
    x = np.zeros((rows, n))
    for j in range(n):
        x[:, j] = x @ weights[:, j] + noise[:, j]
    return x


def _frame(x, rng, traffic) -> pd.DataFrame:
    cols = {}
    for j in range(x.shape[1]):
        cols[f"u{j}_latency"] = 0.05 * np.exp(0.15 * x[:, j])
        cols[f"u{j}_requests"] = traffic * 100 * np.exp(0.05 * rng.normal(0, 1, len(x)))
        cols[f"u{j}_errors"] = np.maximum(0, rng.normal(0, 0.3, len(x)) + 0.3 * np.maximum(x[:, j] - 2, 0))
    return pd.DataFrame(cols)


def planted_sem_cases(seeds: int, first: int = 0) -> list[Case]:
    cases = []
    for seed in range(first, first + seeds):
        rng = np.random.default_rng(1000 + seed)
        weights = _sem(rng)
        origin = int(rng.integers(len(weights)))
        base = _frame(_simulate(weights, 300, rng), rng, 1.0)
        incident = _frame(_simulate(weights, 10, rng, (origin, rng.uniform(4, 8))), rng, rng.uniform(0.6, 1.6))
        units = {f"u{j}": [f"u{j}_latency", f"u{j}_requests", f"u{j}_errors"] for j in range(len(weights))}
        cases.append(Case(f"sem/seed{seed}", "planted-sem", base, incident, units, None, None, f"u{origin}"))
    return cases

"""Planted faults in graph-less networks, no symptom named: each unit a latent load driving its columns
(latency, CPU, errors, requests, a queue), the loads a random acyclic network; the incident shifts one
unit's own noise (its mechanism), which reaches the units downstream. Baseline and incident are one run,
the fault starting at the incident's first row.

* sem/nonlinear: each edge a saturating, one-sided or quadratic function of the parent's load.
* sem/lagged: a unit reacts to its parents' previous row.
* sem/discrete: counts and coarse readings (errors and queues as integers, latency in 10 ms steps, CPU
  in percent).
* sem/rows: 5 to 60 incident rows.
* sem/noisy: another traffic level (requests scaled, latencies a little), innocent units with a one-row
  spike or a requests surge, and 5 % of the incident's cells missing.
"""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import rca_cases

LIMIT = 8.0   # a load saturates here (a queue full, a CPU busy), so a long chain cannot run away
FUNCTIONS = (np.tanh, lambda x: np.maximum(x, 0.0), lambda x: 0.5 * x * np.abs(x))


def _network(rng, n):
    weights = np.triu(rng.uniform(0.4, 1.0, (n, n)) * (rng.random((n, n)) < 2.5 / n), 1)
    return weights * rng.choice([-1, 1], weights.shape), rng.integers(len(FUNCTIONS), size=(n, n))


def _loads(weights, shapes, rows, rng, fault, nonlinear, lagged):
    """Rows of latent loads; `fault` (origin, first row, shift) adds to the origin's own noise."""
    n = len(weights)
    noise = rng.normal(0, 1, (rows, n))
    origin, first, shift = fault
    noise[first:, origin] += shift
    x = np.zeros((rows, n))
    for j in range(n):
        for i in np.nonzero(weights[:, j])[0]:
            parent = FUNCTIONS[shapes[i, j]](x[:, i]) if nonlinear else x[:, i]
            if lagged:
                parent = np.concatenate([[0.0], parent[:-1]])
            x[:, j] += weights[i, j] * parent
        x[:, j] = np.clip(x[:, j] + noise[:, j], -LIMIT, LIMIT)
    return x


def _columns(x, scale, gain, rng, traffic, discrete) -> pd.DataFrame:
    """Each unit's columns from its load; `scale` its typical latency in seconds, `gain` how strongly its
    columns follow its load (a unit downstream may show a change more clearly than its origin)."""
    rows, cols = len(x), {}
    for j in range(x.shape[1]):
        load = gain[j] * x[:, j]
        latency = scale[j] * np.exp(0.15 * load) * (1 + 0.1 * (traffic - 1)) * np.exp(0.03 * rng.normal(0, 1, rows))
        cpu = np.clip(0.3 + 0.06 * load + rng.normal(0, 0.02, rows), 0, 1)
        rate = 0.5 * np.exp(0.5 * np.maximum(load - 1, 0))
        errors = rng.poisson(rate).astype(float) if discrete else np.maximum(0, rng.normal(0, 0.3, rows) + rate - 0.5)
        queue = np.maximum(0, 2 + 1.5 * load + rng.normal(0, 0.5, rows))
        requests = traffic * 100 * np.exp(0.05 * rng.normal(0, 1, rows))
        if discrete:
            latency, cpu, queue, requests = (np.round(latency, 2), np.round(cpu, 2), np.round(queue),
                                             np.round(requests))
        cols |= {f"u{j}_latency": latency, f"u{j}_cpu": cpu, f"u{j}_errors": errors, f"u{j}_queue": queue,
                 f"u{j}_requests": requests}
    return pd.DataFrame(cols)


def _noisy(incident, n_units, origin, rng):
    """Innocent units: a one-row spike in a column, or a requests surge; and missing cells."""
    for u in rng.choice([u for u in range(n_units) if u != origin], size=int(rng.integers(1, 4)), replace=False):
        if rng.random() < 0.5:
            col = f"u{u}_{rng.choice(['latency', 'cpu', 'errors', 'queue'])}"
            row = int(rng.integers(len(incident)))
            incident.loc[row, col] = incident[col].iloc[row] + 10 * incident[col].std() + 1.0
        else:
            incident[f"u{u}_requests"] *= rng.uniform(1.3, 2.0)
    values = incident.to_numpy(dtype=float, copy=True)
    values[rng.random(values.shape) < 0.05] = np.nan
    return pd.DataFrame(values, columns=incident.columns)


def _case(variant: str, seed: int) -> rca_cases.Case:
    rng = np.random.default_rng(zlib.crc32(f"{variant}/{seed}".encode()))
    n = int(rng.integers(8, 25))
    weights, shapes = _network(rng, n)
    origin = int(rng.integers(n))
    base_rows, inc_rows = 300, int(rng.integers(5, 61)) if variant == "rows" else 10
    fault = (origin, base_rows, rng.uniform(2.5, 8))
    x = _loads(weights, shapes, base_rows + inc_rows, rng, fault, variant == "nonlinear", variant == "lagged")
    traffic = rng.uniform(0.6, 1.6) if variant == "noisy" else 1.0
    discrete = variant == "discrete"
    scale, gain = rng.uniform(0.01, 0.5, n), np.exp(rng.uniform(np.log(0.5), np.log(2), n))
    base = _columns(x[:base_rows], scale, gain, rng, 1.0, discrete)
    incident = _columns(x[base_rows:], scale, gain, rng, traffic, discrete)
    if variant == "noisy":
        incident = _noisy(incident, n, origin, rng)
    units = {f"u{j}": [f"u{j}_{k}" for k in ("latency", "cpu", "errors", "queue", "requests")] for j in range(n)}
    return rca_cases.Case(f"sem/{variant}/seed{seed}", f"sem/{variant}", base, incident, units, None, None,
                          f"u{origin}")


def sem_family_cases(seeds: int, first: int = 0) -> list[rca_cases.Case]:
    variants = ("nonlinear", "lagged", "discrete", "rows", "noisy")
    return [_case(v, s) for v in variants for s in range(first, first + seeds)]

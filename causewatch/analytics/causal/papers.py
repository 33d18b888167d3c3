"""The papers' example models as data generators: Fig. 1 and the LU-decomposition performance model.

Lemeire et al., *Causal analysis for performance modeling of computer programs* (Fig. 1, Fig. 4, Fig. 9);
each returns an Example with the data, its discrete columns, the true DAG and the papers' tiers.
"""

from __future__ import annotations

import dataclasses

import networkx as nx
import numpy as np
import pandas as pd

from causewatch.analytics.causal.background import Background


@dataclasses.dataclass
class Example:
    df: pd.DataFrame
    discrete: list[str]
    dag: nx.DiGraph
    background: Background


def fig1(n: int = 1000, seed: int = 0, noise: float = 0.15) -> Example:
    """Fig. 1: A → B ← D, B → C, with nonlinear mechanisms and Gaussian noise of sd `noise` on B
    (ten times that on C, whose signal exp(B) is ten times wider)."""
    rng = np.random.default_rng(seed)
    a, d = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    b = 1.5 * np.sin(3 * a) + d ** 2 + noise * rng.normal(size=n)
    c = np.exp(b) + 10 * noise * rng.normal(size=n)
    dag = nx.DiGraph([("A", "B"), ("D", "B"), ("B", "C")])
    return Example(pd.DataFrame({"A": a, "B": b, "C": c, "D": d}), [], dag, Background())


# The datatypes of the papers' LU experiments: size in bytes, instructions and cycles per instruction
# of one inner-loop operation (made-up but ordered like the papers' findings: longs cost most).
DATATYPES = {"short": (2, 9.0, 1.1), "int": (4, 9.0, 1.0), "float": (4, 11.0, 1.6), "double": (8, 11.0, 1.7),
             "long": (8, 10.0, 2.4), "longdouble": (12, 14.0, 2.0)}
CACHE_BYTES = 64 * 1024      # the matrix stops fitting in L2 when n²·size passes this (the jump of Fig. 11)
MISS_PENALTY = 120.0         # cycles per L2 miss


def lu(n: int = 1000, seed: int = 0, noise: float = 0.05) -> Example:
    """The LU-decomposition performance model (Fig. 4 extended as in Fig. 9): parameters n (5-300),
    datatype, optimization and the clock f_clock; ops = Σ_k (n-k)² is determined by n (so n and ops
    are information equivalent for everything downstream of ops, and t_comp = ops·c_op/f_clock is
    the simpler relation); instr_op by datatype and optimization, l2m_op (L2 misses per op) by n
    and the element size, jumping when the matrix leaves the cache; c_op by datatype, instr_op and
    l2m_op; t_comp by ops, c_op and f_clock. `noise` is the relative measurement noise."""
    rng = np.random.default_rng(seed)
    size = rng.integers(5, 301, n).astype(float)
    names = np.array(list(DATATYPES))
    dtype = names[rng.integers(0, len(names), n)]
    elem, instr, cpi = (np.array([DATATYPES[t][k] for t in dtype]) for k in range(3))
    opt = rng.integers(0, 2, n).astype(float)
    clock = rng.choice([1.6, 2.0, 2.4, 2.8, 3.2], n)

    def noisy(v):
        return v * (1 + noise * rng.normal(size=n))
    ops = (size - 1) * size * (2 * size - 1) / 6
    instr_op = noisy(instr - 3 * opt)
    l2m_op = noisy(0.01 * elem / (1 + np.exp(-(size ** 2 * elem - CACHE_BYTES) / (0.1 * CACHE_BYTES))) + 0.002)
    c_op = noisy(instr_op * cpi + MISS_PENALTY * l2m_op)
    t_comp = noisy(ops * c_op / (clock * 1e9))
    df = pd.DataFrame({"n": size, "datatype": dtype, "optimization": opt, "f_clock": clock, "ops": ops,
                          "instr_op": instr_op, "l2m_op": l2m_op, "c_op": c_op, "t_comp": t_comp})
    dag = nx.DiGraph([("n", "ops"), ("datatype", "instr_op"), ("optimization", "instr_op"), ("n", "l2m_op"),
                      ("datatype", "l2m_op"), ("datatype", "c_op"), ("instr_op", "c_op"), ("l2m_op", "c_op"),
                      ("ops", "t_comp"), ("c_op", "t_comp"), ("f_clock", "t_comp")])
    background = Background(tiers={"inputs": ["n", "datatype", "optimization", "f_clock"], "outputs": ["t_comp"]})
    return Example(df, ["datatype", "optimization"], dag, background)

"""Benchmark of the causal learner against causal-learn's PC (KCI, RCIT, Fisher-z, G²) on the same data.

Families, each over seeds (the issue's list): the papers' Fig. 1 with nonlinear mechanisms; the LU
performance model at three noise levels (papers.lu, with its tiers, given to causal-learn as forbidden
edges too); multiple-index SEMs with 10 and 20 variables; a mixed 12-variable SEM whose every third
variable is discrete (softmax of nonlinear indices; discrete parents enter by a value per level);
the held-out families' harder kind (`mi3-*`, `mixed3-*`: tanh, sine and square of three projections,
noise sd 0.6, expected degree 3, 500-2,000 rows; 4 of 12 variables discrete with 3-5 levels, a
softmax child of continuous parents, non-monotone level embeddings);
linear-Gaussian with 15 variables; pgmpy's example networks (forward-sampled, all discrete); cdt's
Sachs flow-cytometry data against its consensus graph (read from the package folder, cdt itself is
never imported). Prints every fit (CPU seconds, CI tests, SHD, adjacency P/R/F1, arrowhead F1), then
mean ± sd per family and method, then our default against the best baseline of the family.

    .venv/bin/python bench/causal.py --quick          # 3 seeds, 500 rows, KCI on 1 seed: ~15 min here
    .venv/bin/python bench/causal.py                  # 10 seeds, full sizes, KCI on 3 seeds: hours
    .venv/bin/python bench/causal.py --only '^lu' --seeds 10 --kci-seeds 0
Needs the bench extra: causal-learn, pgmpy (==0.1.23, installed --no-deps: later ones fetch models
from the network or import torch), cdt (--no-deps, only for its data files).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import importlib.util
import math
import re
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd

from causewatch.analytics.causal import (
    DEFAULT_ALPHA,
    AutoTest,
    Background,
    Dataset,
    DSeparationOracle,
    FisherZTest,
    KDEMITest,
    PCLearner,
    RCoTTest,
    oracle_dataset,
    papers,
    rcot,
)

MECHANISMS = [np.tanh, np.sin, lambda v: v ** 2 / 2, lambda v: np.exp(-v ** 2), lambda v: np.abs(v),
              lambda v: np.cbrt(v) * 2]


# ---- data ------------------------------------------------------------------------------------------
def random_dag(n_vars: int, seed: int, degree: float = 2.0) -> nx.DiGraph:
    rng = np.random.default_rng(seed)
    names = [f"X{i}" for i in range(n_vars)]
    p = degree / (n_vars - 1)
    dag = nx.DiGraph()
    dag.add_nodes_from(names)
    dag.add_edges_from((names[i], names[j]) for i in range(n_vars) for j in range(i + 1, n_vars) if rng.random() < p)
    return dag


def sample_sem(dag: nx.DiGraph, n: int, seed: int, kind: str) -> tuple[pd.DataFrame, list[str]]:
    """kind: "linear" (Gaussian), "nonlinear" (random monotone and non-monotone mechanisms),
    "mixed" (nonlinear, every third variable cut into 3 levels)."""
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {}
    discrete = []
    for i, v in enumerate(nx.topological_sort(dag)):
        total = np.zeros(n)
        for p in dag.predecessors(v):
            parent = (cols[p] - cols[p].mean()) / (cols[p].std() or 1)
            w = rng.uniform(0.6, 1.2) * rng.choice([-1, 1])
            f = (lambda u: u) if kind == "linear" else MECHANISMS[rng.integers(len(MECHANISMS))]
            total += w * f(parent)
        noise = rng.normal(size=n) if kind == "linear" else rng.uniform(-1, 1, n) * 0.6
        val = total + noise
        if kind == "mixed" and i % 3 == 2:
            val = np.digitize(val, np.quantile(val, [1 / 3, 2 / 3])).astype(float)
            discrete.append(v)
        cols[v] = val
    return pd.DataFrame(cols)[sorted(cols, key=lambda c: int(c[1:]))], discrete


def pgmpy_network(name: str, n: int, seed: int) -> tuple[nx.DiGraph, pd.DataFrame]:
    """A network shipped in pgmpy's package folder, forward-sampled here from its CPDs (pgmpy's own
    sampler breaks on pandas 3)."""
    if not hasattr(np, "product"):
        np.product = np.prod  # pgmpy 0.1.23 (the last without torch or network fetches) predates NumPy 2
    from pgmpy.readwrite import BIFReader
    folder = Path(importlib.util.find_spec("pgmpy").submodule_search_locations[0]) / "utils" / "example_models"
    with gzip.open(folder / f"{name}.bif.gz") as f:
        model = BIFReader(string=f.read().decode()).get_model()
    rng = np.random.default_rng(seed)
    cpds = {c.variable: c for c in model.get_cpds()}
    codes: dict[str, np.ndarray] = {}
    order = list(nx.topological_sort(nx.DiGraph(list(model.edges())))) + \
        [v for v in model.nodes() if model.degree(v) == 0]
    for v in order:
        cpd = cpds[v]
        table = cpd.values  # shape (card, *evidence cards), evidence in cpd.variables[1:] order
        if cpd.variables[1:]:
            probs = table[(slice(None), *[codes[e] for e in cpd.variables[1:]])].T
        else:
            probs = np.tile(table, (n, 1))
        cum = np.cumsum(probs, axis=1)
        codes[v] = (rng.random((n, 1)) * cum[:, -1:] > cum).sum(axis=1)
    df = pd.DataFrame(codes).astype(float)
    df = df.loc[:, df.nunique() > 1]
    dag = nx.DiGraph([(a, b) for a, b in model.edges() if a in df and b in df])
    dag.add_nodes_from(df.columns)
    return dag, df[sorted(df.columns)]


def sachs(n: int, seed: int) -> tuple[nx.DiGraph, pd.DataFrame]:
    """cdt's cyto_full_data.csv and its consensus graph, read without importing cdt (it pulls torch)."""
    folder = Path(importlib.util.find_spec("cdt").submodule_search_locations[0]) / "data" / "resources"
    data = pd.read_csv(folder / "cyto_full_data.csv")
    target = pd.read_csv(folder / "cyto_full_target.csv")
    data = data.sample(n=min(n, len(data)), random_state=seed).reset_index(drop=True)
    data.columns = [c.replace("/", "_") for c in data.columns]
    dag = nx.DiGraph([(a.replace("/", "_"), b.replace("/", "_")) for a, b in target.itertuples(index=False)])
    dag.add_nodes_from(data.columns)
    return dag, data


# ---- scoring ---------------------------------------------------------------------------------------
def true_cpdag(dag: nx.DiGraph) -> set:
    """The CPDAG of a DAG (d-separation oracle); a graph with cycles (Sachs' consensus graph has
    feedback) is scored as it is: its arrows as arrowheads, 2-cycles as undirected edges."""
    if not nx.is_directed_acyclic_graph(dag):
        return {(a, b, not dag.has_edge(b, a)) for a, b in dag.edges if not (dag.has_edge(b, a) and a > b)}
    learner = PCLearner(ci_test=DSeparationOracle(dag), max_depth=len(dag)).fit(oracle_dataset(sorted(dag)))
    return {(e.src, e.dst, e.directed) for e in learner.model_.edges()}


def score(truth: set, found: set) -> dict:
    adj_t = {frozenset((a, b)) for a, b, _ in truth}
    adj_f = {frozenset((a, b)) for a, b, _ in found}
    arr_t = {(a, b) for a, b, d in truth if d}
    arr_f = {(a, b) for a, b, d in found if d}

    def prf(t, f):
        tp = len(t & f)
        p = tp / len(f) if f else 1.0
        r = tp / len(t) if t else 1.0
        return p, r, (2 * p * r / (p + r) if p + r else 0.0)

    mark_t = {frozenset((a, b)): ((a, b) if d else None) for a, b, d in truth}
    mark_f = {frozenset((a, b)): ((a, b) if d else None) for a, b, d in found}
    shd = len(adj_t ^ adj_f) + sum(mark_t[p] != mark_f[p] for p in adj_t & adj_f)
    ap, ar, af = prf(adj_t, adj_f)
    hp, hr, hf = prf(arr_t, arr_f)
    return {"shd": shd, "adj_p": ap, "adj_r": ar, "adj_f1": af, "arr_p": hp, "arr_r": hr, "arr_f1": hf}


# ---- methods ---------------------------------------------------------------------------------------
def run_ours(case, test, max_depth, orientation="majority"):
    learner = PCLearner(ci_test=test, max_depth=max_depth, discrete=case.discrete, background=case.background,
                        orientation=orientation)
    learner.fit(case.df)
    return {(e.src, e.dst, e.directed) for e in learner.model_.edges()}, learner.n_tests_


def causallearn_background(case):
    """The case's tiers as causal-learn forbidden edges: nothing into an input, nothing out of an output."""
    if case.background is None:
        return None
    from causallearn.graph.GraphNode import GraphNode
    from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge
    bk = BackgroundKnowledge()
    tiers = case.background.tiers
    for a in case.df.columns:
        for b in case.df.columns:
            if a != b and (b in tiers.get("inputs", ()) or a in tiers.get("outputs", ())):
                bk.add_forbidden_by_node(GraphNode(a), GraphNode(b))
    return bk


def run_causallearn(case, test_name, alpha, max_depth):
    import causallearn.search.ConstraintBased.PC as pcmod
    from causallearn.utils.cit import CIT
    df = case.df.apply(lambda c: c if pd.api.types.is_numeric_dtype(c) else c.astype("category").cat.codes)
    calls = [0]

    def counting_cit(data, method, **kw):
        inner = CIT(data, method, **kw)

        class Counted:
            method = inner.method

            def __call__(self, *a, **k):
                calls[0] += 1
                return inner(*a, **k)
        return Counted()
    original = pcmod.CIT
    pcmod.CIT = counting_cit
    # RCIT draws its Fourier features from numpy's global generator: seeded per data set, so that a
    # rerun gives the same figures (unseeded, its F1 moved by 0.02 between runs on multi-index 10v)
    np.random.seed(case.seed)
    try:
        cg = pcmod.pc(df.to_numpy(float), alpha, test_name, stable=True, show_progress=False,
                      depth=max_depth if max_depth >= 0 else -1, node_names=list(df.columns),
                      background_knowledge=causallearn_background(case))
    finally:
        pcmod.CIT = original
    g = cg.G.graph
    names = list(df.columns)
    found = set()
    for i in range(len(names)):
        for j in range(len(names)):
            if g[j, i] == 1 and g[i, j] == -1:
                found.add((names[i], names[j], True))
            elif i < j and g[i, j] != 0 and g[j, i] != 0:
                found.add((names[i], names[j], False))
    return found, calls[0]


def timed(fn, *args):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, time.process_time() - c0, time.perf_counter() - w0


# ---- families ------------------------------------------------------------------------------------
def multi_index_sem(dag: nx.DiGraph, n: int, seed: int, discrete_every: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """A multiple-index SEM: each variable is g1(u1) + g2(u2) + noise, u_k random linear indices of
    its standardised parents (a discrete parent enters through a random value per level). With
    `discrete_every` = k, every k-th variable is discrete: 3 levels drawn from a softmax of
    nonlinear functions of its indices."""
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {}
    discrete = []
    for i, v in enumerate(nx.topological_sort(dag)):
        inputs = []
        for p in sorted(dag.predecessors(v)):
            col = cols[p]
            if p in discrete:
                col = rng.normal(size=3)[col.astype(int)]
            inputs.append((col - col.mean()) / (col.std() or 1))
        parents = np.column_stack(inputs) if inputs else np.zeros((n, 0))
        u = parents @ (rng.normal(size=(parents.shape[1], 2)) / math.sqrt(max(parents.shape[1], 1)))
        g = [MECHANISMS[k] for k in rng.integers(len(MECHANISMS), size=2)]
        signal = (g[0](u[:, 0]) + g[1](u[:, 1])) if inputs else np.zeros(n)
        if discrete_every and i % discrete_every == discrete_every - 1:
            logits = np.column_stack([s * g[k % 2](u[:, k % 2]) if inputs else np.zeros(n)
                                      for k, s in enumerate(rng.uniform(1.5, 3, 3) * rng.choice([-1, 1], 3))])
            prob = np.exp(logits - logits.max(axis=1, keepdims=True))
            cum = np.cumsum(prob / prob.sum(axis=1, keepdims=True), axis=1)
            cols[v] = (rng.random((n, 1)) > cum).sum(axis=1).clip(0, 2).astype(float)
            discrete.append(v)
        else:
            sd = signal.std()
            cols[v] = signal / (sd if sd > 0 else 1) + rng.normal(size=n) * 0.5
    return pd.DataFrame(cols)[sorted(cols, key=lambda c: int(c[1:]))], discrete


INDEX_MECHANISMS = [np.tanh, np.sin, lambda v: v ** 2]   # the held-out families' three projections


def _embedding(col: np.ndarray, rng) -> np.ndarray:
    """A discrete parent's effect on one child: an arbitrary, non-monotone value per level."""
    levels = int(col.max()) + 1
    values = rng.normal(size=levels)
    while levels > 2 and (np.all(np.diff(values) > 0) or np.all(np.diff(values) < 0)):
        values = rng.normal(size=levels)   # monotone in the codes: draw again
    return values[col.astype(int)]


def multi_index3_sem(dag: nx.DiGraph, n: int, seed: int, n_discrete: int = 0,
                     noise: float = 0.6, ordinal: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """The held-out families' harder SEM: each continuous variable is tanh(u1) + sin(u2) + u3² over three
    random projections u of its standardised parents, standardised, plus N(0, noise²); a discrete
    parent acts on each child through its own non-monotone embedding of its levels. `n_discrete`
    variables (spread over the order) are discrete with 3-5 levels, drawn from a softmax over a
    nonlinear score per level (tanh, sin or square of a projection of the parents); `ordinal`: over
    one score (a continuous child's signal) times the level's rank, at a weaker scale."""
    rng = np.random.default_rng(seed)
    order = list(nx.topological_sort(dag))
    spread = np.linspace(len(order) - 1, 0, n_discrete, endpoint=False) if n_discrete else []
    picked = set(np.round(spread).astype(int))
    cols: dict[str, np.ndarray] = {}
    discrete = []
    for i, v in enumerate(order):
        inputs = []
        for p in sorted(dag.predecessors(v)):
            col = _embedding(cols[p], rng) if p in discrete else cols[p]
            inputs.append((col - col.mean()) / (col.std() or 1))
        parents = np.column_stack(inputs) if inputs else np.zeros((n, 0))
        if i in picked:
            levels = int(rng.integers(3, 6))
            if inputs and ordinal:
                rank = np.arange(levels) - (levels - 1) / 2
                logits = np.outer(_signal(parents, rng), rank) * rng.uniform(0.5, 1.5) + rng.normal(size=levels) * 0.5
            elif inputs:
                u = parents @ (rng.normal(size=(parents.shape[1], levels)) / math.sqrt(parents.shape[1]))
                scores = np.column_stack([INDEX_MECHANISMS[k % 3](u[:, k]) for k in range(levels)])
                logits = scores * rng.uniform(1.5, 3.0, levels)
            else:
                logits = np.tile(rng.normal(size=levels) * 0.5, (n, 1))
            prob = np.exp(logits - logits.max(axis=1, keepdims=True))
            cum = np.cumsum(prob / prob.sum(axis=1, keepdims=True), axis=1)
            cols[v] = (rng.random((n, 1)) > cum).sum(axis=1).clip(0, levels - 1).astype(float)
            discrete.append(v)
            continue
        signal = _signal(parents, rng) if inputs else np.zeros(n)
        cols[v] = signal + rng.normal(size=n) * (noise if inputs else 1.0)
    return pd.DataFrame(cols)[sorted(cols, key=lambda c: int(c[1:]))], discrete


def _signal(parents: np.ndarray, rng) -> np.ndarray:
    """tanh(u1) + sin(u2) + u3² over three random projections u of the parents, standardised."""
    u = parents @ (rng.normal(size=(parents.shape[1], 3)) / math.sqrt(parents.shape[1]))
    signal = sum(g(u[:, k]) for k, g in enumerate(INDEX_MECHANISMS))
    return (signal - signal.mean()) / (signal.std() or 1)


@dataclasses.dataclass
class Case:
    family: str
    kind: str            # nonlinear, mixed, linear, discrete, real: which baselines and goals apply
    seed: int
    dag: nx.DiGraph
    df: pd.DataFrame
    discrete: list
    background: Background | None = None


def families(quick: bool):
    """(family, kind, seeds, maker(seed) -> Case fields): the issue's benchmark families."""
    rows = 500 if quick else None

    def synth(nv, n, kind, degree=2.0):
        def make(seed):
            dag = random_dag(nv, seed=1000 * seed + nv, degree=degree)
            if kind == "linear":
                df, disc = sample_sem(dag, rows or n, seed=1000 * seed + nv + 1, kind="linear")
            else:
                df, disc = multi_index_sem(dag, rows or n, seed=1000 * seed + nv + 1,
                                           discrete_every=3 if kind == "mixed" else 0)
            return dag, df, disc, None
        return make

    def hard(nv, n, n_discrete, ordinal=False):
        """The held-out families' kind: three projections, noise 0.6, expected degree 3."""
        def make(seed):
            dag = random_dag(nv, seed=7000 + 1000 * seed + nv, degree=3.0)
            df, disc = multi_index3_sem(dag, n, seed=7000 + 1000 * seed + nv + 1, n_discrete=n_discrete,
                                        ordinal=ordinal)
            return dag, df, disc, None
        return make

    def paper(fn, **kw):
        def make(seed):
            ex = fn(n=rows or 1000, seed=seed, **kw)
            return ex.dag, ex.df, ex.discrete, ex.background
        return make

    r1, r2 = rows or 1000, rows or 2000
    out = [(f"fig1-{r1}r", "nonlinear", paper(papers.fig1)),
           *[(f"lu-noise{noise}-{r1}r", "nonlinear", paper(papers.lu, noise=noise)) for noise in (0.02, 0.05, 0.1)],
           (f"multi-index-10v-{r1}r", "nonlinear", synth(10, 1000, "nonlinear")),
           (f"mixed-12v-{r2}r", "mixed", synth(12, 2000, "mixed")),
           (f"linear-15v-{r2}r", "linear", synth(15, 2000, "linear")),
           *[(f"mi3-10v-{n}r", "nonlinear", hard(10, n, 0)) for n in ((500,) if quick else (500, 1000))],
           *[(f"mixed3-12v-{n}r", "mixed", hard(12, n, 4)) for n in ((500,) if quick else (500, 2000))],
           (f"mixed3o-12v-{r2}r", "mixed", hard(12, 2000, 4, ordinal=True))]
    if not quick:
        out.insert(5, ("multi-index-20v-2000r", "nonlinear", synth(20, 2000, "nonlinear")))
    for name in ["asia", "sachs", "child"] + ([] if quick else ["insurance", "alarm"]):
        def make(seed, name=name):
            dag, df = pgmpy_network(name, 2000 if quick else 5000, seed=seed)
            return dag, df, list(df.columns), None
        out.append((f"pgmpy-{name}-{2000 if quick else 5000}r", "discrete", make))

    def make_sachs(seed):
        dag, df = sachs(1000 if quick else 2000, seed=seed)
        return dag, df, [], None
    out.append((f"cdt-sachs-{1000 if quick else 2000}r", "real", make_sachs))
    return out


def methods(case: Case, args, kci: bool):
    """(name, function, arguments) of each method run on the case; ours first."""
    d = args.max_depth
    ours = [("ours-auto", run_ours, (case, AutoTest(alpha=args.alpha), d))]
    if args.conservative:
        ours.append(("ours-cons", run_ours, (case, AutoTest(alpha=args.alpha), d, "conservative")))
    if args.lemeire:
        ours.append(("ours-lemeire", run_ours, (case, KDEMITest("lemeire"), d)))
    if args.variants and case.kind != "discrete":
        ours += [("ours-kde", run_ours, (case, KDEMITest(alpha=_level(args)), d)),
                 ("ours-rcot", run_ours, (case, RCoTTest(alpha=_level(args)), d))]
    if case.kind == "discrete":
        base = [("cl-gsq", run_causallearn, (case, "gsq", args.cl_alpha, d)),
                ("cl-fisherz", run_causallearn, (case, "fisherz", args.cl_alpha, d))]
    else:
        base = [("cl-fisherz", run_causallearn, (case, "fisherz", args.cl_alpha, d)),
                ("cl-rcit", run_causallearn, (case, "rcit", args.cl_alpha, d))]
        if kci:
            base.append(("cl-kci", run_causallearn, (case, "kci", args.cl_alpha, d)))
    return ours + base


# ---- main ------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds, 500 rows, smaller networks: a run of minutes")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per family (default 10, --quick 3)")
    ap.add_argument("--kci-seeds", type=int, default=None,
                    help="seeds per family on which KCI also runs (default 3, --quick 1: ~1 min per 10-variable fit)")
    ap.add_argument("--alpha", type=float, default=None,
                    help="our level (default: causewatch learn's, per data kind for ours-auto, 0.01 for the rest)")
    ap.add_argument("--cl-alpha", type=float, default=0.05, help="causal-learn's level (its default)")
    ap.add_argument("--max-depth", type=int, default=3)
    ap.add_argument("--only", default="", help="run only families whose name matches this regular expression")
    ap.add_argument("--variants", action="store_true",
                    help="also run the KDE and RCoT tests on their own (the default picks one per data kind)")
    ap.add_argument("--lemeire", action="store_true", help="also run the papers' estimator and thresholds")
    ap.add_argument("--conservative", action="store_true",
                    help="also run our default with the conservative collider rule (compare arrowhead F1)")
    ap.add_argument("--partial-fit", action="store_true", help="also measure partial_fit's share of a full fit")
    ap.add_argument("--fpr", type=int, default=0, metavar="REPS",
                    help="also measure the tests' false-dependence rate on REPS conditionally independent data sets")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for every method (idle OpenBLAS workers spin: with 2, KCI's CPU time "
                         "rose from 54 s to 94 s on nonlinear-10v); 0 leaves the library default")
    args = ap.parse_args()
    seeds = args.seeds or (3 if args.quick else 10)
    kci_seeds = args.kci_seeds if args.kci_seeds is not None else (1 if args.quick else 3)
    limits = limit_blas(args.blas_threads)  # noqa: F841 (the limit lasts while the object lives)
    warm_up(args)
    rows = []
    print(f"{'case':<30}{'method':<12}{'cpu_s':>8}{'tests':>7}{'shd':>5}{'adjP':>6}{'adjR':>6}{'adjF1':>6}{'arrF1':>6}")
    for family, kind, make in families(args.quick):
        if not re.search(args.only, family):
            continue
        for seed in range(seeds):
            case = Case(family, kind, seed, *make(seed))
            truth = true_cpdag(case.dag)
            for name, fn, fn_args in methods(case, args, kci=seed < kci_seeds):
                (found, tests), cpu, _wall = timed(fn, *fn_args)
                s = score(truth, found)
                rows.append({"family": family, "kind": kind, "seed": seed, "method": name, "cpu": cpu,
                             "tests": tests, **s})
                print(f"{family + '-s' + str(seed):<30}{name:<12}{cpu:>8.2f}{tests:>7}{s['shd']:>5}{s['adj_p']:>6.2f}"
                      f"{s['adj_r']:>6.2f}{s['adj_f1']:>6.2f}{s['arr_f1']:>6.2f}", flush=True)
    print()
    if rows:
        summarize(pd.DataFrame(rows), seeds, kci_seeds)
    if args.partial_fit:
        partial_fit_cost(args)
    if args.fpr:
        false_dependence_rates(args)


def summarize(res: pd.DataFrame, seeds: int, kci_seeds: int) -> None:
    """Per family and method: mean ± sd of adjacency F1 and CPU seconds; then our default against
    the best baseline (F1 difference) and each baseline's time over ours, on the seeds both ran."""
    print(f"summary: mean ± sd over {seeds} seeds (cl-kci over the first {kci_seeds})")
    print(f"{'family':<26}{'method':<12}{'adjF1':>14}{'arrF1':>14}{'cpu_s':>18}")
    for (family, method), g in res.groupby(["family", "method"], sort=False):
        print(f"{family:<26}{method:<12}{g.adj_f1.mean():>8.3f} ± {g.adj_f1.std(ddof=0):.2f}"
              f"{g.arr_f1.mean():>8.3f} ± {g.arr_f1.std(ddof=0):.2f}{g.cpu.mean():>10.3f} ± {g.cpu.std(ddof=0):.3f}")
    print("\nagainst the goals (F1: ours - best baseline on the same seeds; time: baseline CPU / ours):")
    for family, g in res.groupby("family", sort=False):
        kind = g.kind.iloc[0]
        by = g.pivot(index="seed", columns="method", values="adj_f1")
        cpu = g.pivot(index="seed", columns="method", values="cpu")
        ours = [m for m in by.columns if m.startswith("ours-")]
        base = {"nonlinear": ["cl-kci", "cl-rcit"], "mixed": ["cl-kci", "cl-rcit"], "linear": ["cl-fisherz"],
                "discrete": ["cl-gsq", "cl-fisherz"], "real": ["cl-kci", "cl-rcit", "cl-fisherz"]}[kind]
        base = [b for b in base if b in by.columns]
        slack = 0.01 if kind in ("linear", "discrete") else 0.0
        for m in ours:
            parts = []
            for b in base:
                both = by[[m, b]].dropna()
                parts.append(f"F1 vs {b} {both[m].mean() - both[b].mean():+.3f} (n={len(both)})")
            if base:
                best = max(base, key=lambda b: by[b].mean())
                both = by[[m, best]].dropna()
                met = both[m].mean() >= both[best].mean() - slack
                parts.append(f"goal F1 {'met' if met else 'NOT met'}")
            for b, factor in (("cl-kci", 100), ("cl-rcit", 10), ("cl-gsq", 0.5)):
                if b in cpu.columns:
                    both = cpu[[m, b]].dropna()
                    ratio = both[b].sum() / max(both[m].sum(), 1e-9)
                    met = "met" if ratio >= factor else "NOT met"
                    parts.append(f"{b}/ours time {ratio:.1f}x ({met}: >= {factor:g}x)")
            print(f"{family:<26}{m:<12}" + "; ".join(parts))


def limit_blas(threads: int):
    """Limit the BLAS pools (numpy/scipy's OpenBLAS, used by KCI) to `threads`; None when 0 or
    threadpoolctl is missing (it comes with scikit-learn, which causal-learn needs)."""
    if threads <= 0 or importlib.util.find_spec("threadpoolctl") is None:
        print("BLAS threads: library default")
        return None
    from threadpoolctl import threadpool_limits
    print(f"BLAS threads: {threads}")
    return threadpool_limits(threads, user_api="blas")


def _level(args) -> float:
    """Our level for the tests that take one level on every kind of data."""
    return DEFAULT_ALPHA if args.alpha is None else args.alpha


def warm_up(args) -> None:
    """Run every method once on a 60-row DataFrame so that the timings below are of the fits, not of
    each library's one-time start-up in the process (imports, numba loading its compiled cache)."""
    dag = random_dag(4, seed=0)
    df, _ = sample_sem(dag, 60, seed=0, kind="nonlinear")
    case = Case("warm-up", "nonlinear", 0, dag, df, [])
    codes = Case("warm-up", "discrete", 0, dag, (df > 0).astype(float), list(df.columns))
    c0 = time.process_time()
    for test in (AutoTest(alpha=args.alpha), KDEMITest(alpha=_level(args)), RCoTTest(alpha=_level(args)),
                 FisherZTest(alpha=_level(args))):
        run_ours(case, test, 1)
    run_ours(codes, KDEMITest(alpha=_level(args)), 1)
    for test in ("fisherz", "kci", "rcit"):
        run_causallearn(case, test, _level(args), 1)
    run_causallearn(codes, "gsq", _level(args), 1)
    rcot.chi2_mixture_sf(np.arange(1.0, 9.0), 40.0)   # loads LPB's numba code, which the 60 rows may not reach
    print(f"warm-up of all methods on a 60-row DataFrame: {time.process_time() - c0:.2f} CPU-s, not counted below")


def false_dependence_rates(args) -> None:
    """How often each test calls x and y dependent when x ⊥ y | z, x and y both depending on z
    (linearly: Gaussian; or y through tanh, the calibrated test's harder case)."""
    print(f"\nfalse dependence at alpha={_level(args)} over {args.fpr} data sets (x ⊥ y | z):")
    for kind in ("gaussian", "nonlinear"):
        for n, dz in [(500, 0), (500, 2), (1000, 1), (2000, 3)]:
            wrong = {"kde": 0, "fisher-z": 0}
            for rep in range(args.fpr):
                rng = np.random.default_rng([rep, n, dz])
                z = rng.normal(size=(n, dz))
                s = z.sum(axis=1)
                df = pd.DataFrame({"x": 0.5 * s + rng.normal(size=n),
                                   "y": (0.7 * s if kind == "gaussian" else np.tanh(s)) + rng.normal(size=n),
                                   **{f"z{i}": z[:, i] for i in range(dz)}})
                data = Dataset(df)
                zs = [f"z{i}" for i in range(dz)]
                for name, test in (("kde", KDEMITest(alpha=_level(args))),
                                   ("fisher-z", FisherZTest(alpha=_level(args)))):
                    wrong[name] += not test.test(data, "x", "y", zs).independent
            print(f"  {kind:<10} n={n:<5} |z|={dz}: " +
                  ", ".join(f"{k} {v / args.fpr:.3f}" for k, v in wrong.items()), flush=True)


def partial_fit_cost(args) -> None:
    """A 10 % update through partial_fit: CI tests computed, as a share of a full fit's."""
    for kind, nv, n in [("nonlinear", 10, 1000), ("linear", 10, 1000)]:
        dag = random_dag(nv, seed=nv)
        df, disc = sample_sem(dag, n, seed=nv + n, kind=kind)
        cut = int(n / 1.1)
        learner = PCLearner(ci_test=KDEMITest(alpha=_level(args)), max_depth=args.max_depth, discrete=disc)
        learner.fit(df.iloc[:cut])
        learner.partial_fit(df.iloc[cut:])
        scratch = PCLearner(ci_test=KDEMITest(alpha=_level(args)), max_depth=args.max_depth, discrete=disc).fit(df)
        same = {(e.src, e.dst, e.directed) for e in learner.model_.edges()} == \
               {(e.src, e.dst, e.directed) for e in scratch.model_.edges()}
        print(f"partial_fit {kind}-{nv}v +10% rows: {learner.n_tests_} CI tests recomputed, {learner.n_reused_} reused;"
              f" full fit {scratch.n_tests_} -> {learner.n_tests_ / max(scratch.n_tests_, 1):.0%};"
              f" equal to a fit from scratch: {same}")


if __name__ == "__main__":
    main()

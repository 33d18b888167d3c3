"""Benchmark of the causal learner against causal-learn's PC (Fisher-z and KCI) on the same data.

Cases: nonlinear, mixed and linear-Gaussian synthetic DAGs; pgmpy's example .bif networks (sampled);
cdt's Sachs flow-cytometry data with its consensus graph (read from the package folder, cdt itself is
never imported). Prints per case and method: CPU and wall seconds, CI tests, SHD, adjacency and
arrowhead precision/recall/F1; then partial_fit's share of a full fit's CI tests.

    .venv/bin/python bench/causal.py                 # everything (KCI only where rows <= --kci-rows)
    .venv/bin/python bench/causal.py --quick         # small cases, for a smoke run
    .venv/bin/python bench/causal.py --only ^linear --seeds 8 --no-partial-fit   # linear over 8 seeds
Needs the bench extra: causal-learn, pgmpy (==0.1.23, installed --no-deps: later ones fetch models
from the network or import torch), cdt (--no-deps, only for its data files).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import re
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
from causewatch.analytics.causal.ci import (
    Dataset,
    DSeparationOracle,
    FisherZTest,
    KDEMITest,
    oracle_dataset,
)
from causewatch.analytics.causal.pc import PCLearner

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
    frame = pd.DataFrame(codes).astype(float)
    frame = frame.loc[:, frame.nunique() > 1]
    dag = nx.DiGraph([(a, b) for a, b in model.edges() if a in frame and b in frame])
    dag.add_nodes_from(frame.columns)
    return dag, frame[sorted(frame.columns)]


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
def run_ours(frame, discrete, test, max_depth):
    learner = PCLearner(ci_test=test, max_depth=max_depth, discrete=discrete)
    learner.fit(frame)
    return {(e.src, e.dst, e.directed) for e in learner.model_.edges()}, learner.n_tests_


def run_causallearn(frame, test_name, alpha, max_depth):
    import causallearn.search.ConstraintBased.PC as pcmod
    from causallearn.utils.cit import CIT
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
    try:
        cg = pcmod.pc(frame.to_numpy(float), alpha, test_name, stable=True, show_progress=False,
                      depth=max_depth if max_depth >= 0 else -1)
    finally:
        pcmod.CIT = original
    g = cg.G.graph
    names = list(frame.columns)
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


# ---- main ------------------------------------------------------------------------------------------
def cases(quick: bool, only: str = "", seeds: int = 1):
    """Synthetic cases for each of `seeds` DAG/data seeds (seed 0 is the original case, later ones
    are named ...-s1, -s2), then the packaged networks."""
    synth = [("nonlinear", 10, 1000), ("mixed", 10, 1000), ("linear", 10, 1000)]
    if not quick:
        synth += [("nonlinear", 20, 2000), ("mixed", 20, 2000), ("linear", 20, 2000)]
    for kind, nv, n in synth:
        for s in range(seeds):
            name = f"{kind}-{nv}v-{n}r" + (f"-s{s}" if s else "")
            if not re.search(only, name):
                continue
            dag = random_dag(nv, seed=nv + 1000 * s)
            frame, disc = sample_sem(dag, n, seed=nv + n + 1000 * s, kind=kind)
            yield name, kind, dag, frame, disc
    for name in (["asia", "sachs"] if quick else ["asia", "sachs", "child", "insurance", "alarm"]):
        if not re.search(only, f"pgmpy-{name}-2000r"):
            continue
        dag, frame = pgmpy_network(name, 2000, seed=1)
        yield f"pgmpy-{name}-2000r", "discrete", dag, frame, list(frame.columns)
    dag, frame = sachs(1000 if quick else 2000, seed=1)
    yield f"cdt-sachs-{len(frame)}r", "real", dag, frame, []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--max-depth", type=int, default=3)
    ap.add_argument("--kci-rows", type=int, default=1000, help="run KCI only on cases with at most these rows")
    ap.add_argument("--kci-vars", type=int, default=10, help="... and at most these variables")
    ap.add_argument("--kci-kinds", default="nonlinear,mixed,linear,real",
                    help="... and of these kinds (KCI takes seconds per test)")
    ap.add_argument("--lemeire", action="store_true", help="also run the papers' estimator")
    ap.add_argument("--only", default="", help="run only cases whose name matches this regular expression")
    ap.add_argument("--seeds", type=int, default=1,
                    help="repeat the synthetic cases over this many DAG/data seeds (KCI on the first only)")
    ap.add_argument("--no-partial-fit", action="store_true", help="skip the partial_fit measurement")
    ap.add_argument("--fpr", type=int, default=0, metavar="REPS",
                    help="also measure the tests' false-dependence rate on REPS conditionally independent data sets")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for every method (idle OpenBLAS workers spin: with 2, KCI's CPU time "
                         "rose from 54 s to 94 s on nonlinear-10v); 0 leaves the library default")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="time each method's first call in the process (imports, numba's cache load) too")
    args = ap.parse_args()
    limits = limit_blas(args.blas_threads)  # noqa: F841 (the limit lasts while the object lives)
    if not args.no_warm_up:
        warm_up(args)
    rows = []
    header = f"{'case':<24}{'method':<16}{'cpu_s':>8}{'wall_s':>8}{'tests':>7}{'shd':>5}" \
             f"{'adjP':>6}{'adjR':>6}{'adjF1':>6}{'arrP':>6}{'arrR':>6}{'arrF1':>6}"
    print(header)
    for case, kind, dag, frame, disc in cases(args.quick, args.only, args.seeds):
        if not re.search(args.only, case):
            continue
        truth = true_cpdag(dag)
        depth = args.max_depth
        methods = [("ours-kde", run_ours, (frame, disc, KDEMITest(alpha=args.alpha), depth)),
                   ("ours-fisherz", run_ours, (frame, disc, FisherZTest(alpha=args.alpha), depth)),
                   ("cl-fisherz", run_causallearn, (frame, "fisherz", args.alpha, depth))]
        if args.lemeire:
            methods.insert(1, ("ours-lemeire", run_ours, (frame, disc, KDEMITest("lemeire"), depth)))
        if len(frame) <= args.kci_rows and frame.shape[1] <= args.kci_vars and kind in args.kci_kinds.split(",") \
                and not re.search(r"-s\d+$", case):
            methods.append(("cl-kci", run_causallearn, (frame, "kci", args.alpha, depth)))
        for name, fn, fn_args in methods:
            (found, tests), cpu, wall = timed(fn, *fn_args)
            s = score(truth, found)
            rows.append({"case": case, "kind": kind, "method": name, "cpu": cpu, "wall": wall, "tests": tests, **s})
            print(f"{case:<24}{name:<16}{cpu:>8.2f}{wall:>8.2f}{tests:>7}{s['shd']:>5}{s['adj_p']:>6.2f}"
                  f"{s['adj_r']:>6.2f}{s['adj_f1']:>6.2f}{s['arr_p']:>6.2f}{s['arr_r']:>6.2f}{s['arr_f1']:>6.2f}",
                  flush=True)
    print()
    if rows:
        summarize(pd.DataFrame(rows))
    if not args.no_partial_fit:
        partial_fit_cost(args)
    if args.fpr:
        false_dependence_rates(args)


def limit_blas(threads: int):
    """Limit the BLAS pools (numpy/scipy's OpenBLAS, used by KCI) to `threads`; None when 0 or
    threadpoolctl is missing (it comes with scikit-learn, which causal-learn needs)."""
    if threads <= 0 or importlib.util.find_spec("threadpoolctl") is None:
        print("BLAS threads: library default")
        return None
    from threadpoolctl import threadpool_limits
    print(f"BLAS threads: {threads}")
    return threadpool_limits(threads, user_api="blas")


def warm_up(args) -> None:
    """Run every method once on a 60-row frame so that the timings below are of the fits, not of
    each library's one-time start-up in the process (imports, numba loading its compiled cache)."""
    dag = random_dag(4, seed=0)
    frame, _ = sample_sem(dag, 60, seed=0, kind="nonlinear")
    c0 = time.process_time()
    run_ours(frame, [], KDEMITest(alpha=args.alpha), 1)
    run_ours(frame, [], FisherZTest(alpha=args.alpha), 1)
    for test in ("fisherz", "kci"):
        run_causallearn(frame, test, args.alpha, 1)
    print(f"warm-up of all methods on a 60-row frame: {time.process_time() - c0:.2f} CPU-s, not counted below")


def summarize(res: pd.DataFrame) -> None:
    by = res.set_index(["case", "method"])
    for case in res.case.unique():
        r = by.loc[case]
        if "cl-kci" in r.index:
            print(f"{case}: adjacency F1 ours-kde {r.loc['ours-kde', 'adj_f1']:.2f} vs KCI {r.loc['cl-kci', 'adj_f1']:.2f};"
                  f" KCI/ours CPU time {r.loc['cl-kci', 'cpu'] / r.loc['ours-kde', 'cpu']:.0f}x")
        if case.startswith("linear"):
            print(f"{case}: adjacency F1 ours-kde {r.loc['ours-kde', 'adj_f1']:.2f} vs Fisher-z "
                  f"{r.loc['cl-fisherz', 'adj_f1']:.2f} (difference {r.loc['ours-kde', 'adj_f1'] - r.loc['cl-fisherz', 'adj_f1']:+.2f})")
    linear = res[res.kind == "linear"].pivot(index="case", columns="method", values="adj_f1")
    if len(linear):
        diff = linear["ours-kde"] - linear["cl-fisherz"]
        print(f"linear-Gaussian over {len(diff)} cases: worst adjacency F1 ours-kde - Fisher-z {diff.min():+.2f} "
              f"({diff.idxmin()}; goal >= -0.02)")


def false_dependence_rates(args) -> None:
    """How often each test calls x and y dependent when x ⊥ y | z, x and y both depending on z
    (linearly: Gaussian; or y through tanh, the calibrated test's harder case)."""
    print(f"\nfalse dependence at alpha={args.alpha} over {args.fpr} data sets (x ⊥ y | z):")
    for kind in ("gaussian", "nonlinear"):
        for n, dz in [(500, 0), (500, 2), (1000, 1), (2000, 3)]:
            wrong = {"kde": 0, "fisher-z": 0}
            for rep in range(args.fpr):
                rng = np.random.default_rng([rep, n, dz])
                z = rng.normal(size=(n, dz))
                s = z.sum(axis=1)
                frame = pd.DataFrame({"x": 0.5 * s + rng.normal(size=n),
                                      "y": (0.7 * s if kind == "gaussian" else np.tanh(s)) + rng.normal(size=n),
                                      **{f"z{i}": z[:, i] for i in range(dz)}})
                data = Dataset(frame)
                zs = [f"z{i}" for i in range(dz)]
                for name, test in (("kde", KDEMITest(alpha=args.alpha)), ("fisher-z", FisherZTest(alpha=args.alpha))):
                    wrong[name] += not test.test(data, "x", "y", zs).independent
            print(f"  {kind:<10} n={n:<5} |z|={dz}: " +
                  ", ".join(f"{k} {v / args.fpr:.3f}" for k, v in wrong.items()), flush=True)


def partial_fit_cost(args) -> None:
    """A 10 % update through partial_fit: CI tests computed, as a share of a full fit's."""
    for kind, nv, n in [("nonlinear", 10, 1000), ("linear", 10, 1000)]:
        dag = random_dag(nv, seed=nv)
        frame, disc = sample_sem(dag, n, seed=nv + n, kind=kind)
        cut = int(n / 1.1)
        learner = PCLearner(ci_test=KDEMITest(alpha=args.alpha), max_depth=args.max_depth, discrete=disc)
        learner.fit(frame.iloc[:cut])
        learner.partial_fit(frame.iloc[cut:])
        scratch = PCLearner(ci_test=KDEMITest(alpha=args.alpha), max_depth=args.max_depth, discrete=disc).fit(frame)
        same = {(e.src, e.dst, e.directed) for e in learner.model_.edges()} == \
               {(e.src, e.dst, e.directed) for e in scratch.model_.edges()}
        print(f"partial_fit {kind}-{nv}v +10% rows: {learner.n_tests_} CI tests recomputed, {learner.n_reused_} reused;"
              f" full fit {scratch.n_tests_} -> {learner.n_tests_ / max(scratch.n_tests_, 1):.0%}; equal to a fit from scratch: {same}")


if __name__ == "__main__":
    main()

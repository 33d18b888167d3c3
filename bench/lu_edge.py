"""The LU model's faint edge c_op -> t_comp (tests/analytics/causal/test_papers.py) tested on its own:
p-values of c_op – t_comp given c_op's parents, then given those and t_comp's other parents (the set
PCLearner's unmasking check uses), by our RCoT and, when causal-learn is installed, by its KCI.

Why: a test calibrated on mixed conditioning sets no longer finds the edge given c_op's parents
(docs/causal-measured.md, "z's features"); this shows whether a kernel test finds it there, and given which set.
Usage: python bench/lu_edge.py [--seeds 6] [--rows 1000] [--noise 0.05] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from causewatch.analytics.causal import entropy, papers
from causewatch.analytics.causal.ci import Dataset
from causewatch.analytics.causal.rcot import RCoT

PARENTS = ("datatype", "instr_op", "l2m_op")    # c_op's
OTHERS = ("ops", "f_clock")                     # t_comp's other parents


def kci_test(values: np.ndarray):
    """causal-learn's KCI on standardised values (discrete columns by their codes), or None without it."""
    try:
        from causallearn.utils.cit import CIT
    except ImportError:
        return None
    return CIT((values - values.mean(0)) / values.std(0), "kci")


def one(seed: int, rows: int, noise: float) -> dict:
    ex = papers.lu(n=rows, seed=seed, noise=noise)
    data = Dataset(ex.df, ex.discrete)
    ours = RCoT(entropy.prepare(data.values, data.discrete), data.discrete)
    kci = kci_test(data.values)
    x, y = data.index("c_op"), data.index("t_comp")
    out = {"seed": seed}
    for name, z in (("parents", PARENTS), ("parents+others", PARENTS + OTHERS)):
        cols = [data.index(v) for v in z]
        c0 = time.process_time()
        out[f"ours {name}"] = ours.pvalue(x, y, tuple(cols))[1]
        c1 = time.process_time()
        out[f"kci {name}"] = None if kci is None else float(kci(x, y, cols))
        out[f"cpu_s {name}"] = {"ours": c1 - c0, "kci": time.process_time() - c1}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [one(s, args.rows, args.noise) for s in range(args.seeds)]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"c_op – t_comp, LU model, {args.rows} rows, noise {args.noise}: p given c_op's parents "
          f"{PARENTS} | given those and {OTHERS}")
    for r in rows:
        kci = "KCI not installed" if r["kci parents"] is None else \
            f"KCI {r['kci parents']:.3f} | {r['kci parents+others']:.4f}"
        print(f"  seed {r['seed']}: ours {r['ours parents']:.3f} | {r['ours parents+others']:.4f}; {kci}")
    for name in ("ours", "kci"):
        p = [r[f"{name} parents"] for r in rows]
        if None not in p:
            print(f"{name}: found at 0.01 given the parents on {int(np.sum(np.array(p) <= 0.01))} of {len(p)}")


if __name__ == "__main__":
    main()

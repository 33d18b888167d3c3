"""`causewatch phases`: SimPoint 3 compatible phase clustering of a .bb(.gz) file, or of the BBVs a daemon
stored (read through its HTTP API, or from a stopped daemon's store file).

Prints the chosen k, the BIC of each k tried and per phase its representative interval and weight.
"""

from __future__ import annotations

import json

from causewatch.commands import check_output
from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

EPILOG = """examples:
  valgrind --tool=exp-bbv --bb-out-file=app.bb ./app
  causewatch phases app.bb --max-k 30 --save-simpoints app.simpoints --save-weights app.weights
  causewatch phases app.bb.gz --fixed-length off --seed 7 --json
  causewatch phases app.bb --initkm samp --variance-floor 0       # SimPoint 3.2's own clustering
  causewatch phases --target app:solver --kind python          # BBVs stored by the running daemon
  causewatch phases --db causewatch.duckdb --target myapp --save-labels app.labels   # a stopped one's store
"""


def add_arguments(parser) -> None:
    parser.add_argument("file", nargs="?",
                        help="SimPoint frequency-vector file (T:id:count ...; gzipped if named *.gz); "
                             "without it, the daemon's BBVs")
    add_source_arguments(parser)
    parser.add_argument("--max-k", type=int, default=30, help="largest k of the binary search (default 30)")
    parser.add_argument("--k", type=int, help="cluster with this k instead of searching")
    parser.add_argument("--dim", type=int, default=15, help="random projection dimensions (default 15)")
    parser.add_argument("--fixed-length", choices=("on", "off"), default="on",
                        help="on: every interval weighs the same; off: an interval weighs its size")
    parser.add_argument("--seed", type=int, default=493575226, help="seed of projection and k-means starts")
    parser.add_argument("--num-init-seeds", type=int, default=5, help="k-means restarts per k (default 5)")
    parser.add_argument("--iters", type=int, default=100, help="k-means iteration limit (default 100)")
    parser.add_argument("--bic-threshold", type=float, default=0.9, help="fraction of the BIC range (default 0.9)")
    parser.add_argument("--initkm", choices=("k-means++", "samp"), default="k-means++",
                        help="k-means starts: k-means++ (default) or samp, drawn uniformly as SimPoint 3.2")
    parser.add_argument("--variance-floor", type=float, default=1e-4,
                        help="the BIC's variance never falls below this fraction of the variance at k = 1, so "
                             "a loop kernel cut at its loop boundaries stays one phase (default 1e-4; "
                             "0 with --initkm samp is SimPoint 3.2)")
    parser.add_argument("--target", help="with a DuckDB store: the target whose vectors to cluster "
                                         "(needed when the store has several; a wrong one lists them)")
    parser.add_argument("--kind", choices=("native", "python"),
                        help="with a DuckDB store: native IP samples or Python frames (needed when both)")
    parser.add_argument("--save-simpoints", metavar="F", help="write '<interval> <phase>' lines")
    parser.add_argument("--save-weights", metavar="F", help="write '<weight> <phase>' lines")
    parser.add_argument("--save-labels", metavar="F", help="write '<phase> <distance>' per interval")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _load(args):
    if args.file is None or args.file.endswith((".duckdb", ".db")):
        args.db = args.db or args.file
        return _load_stored(args)
    if args.target or args.kind:
        raise InputError("--target and --kind apply only to the BBVs a daemon stored, not to a .bb file")
    from causewatch.analytics.phases import formats
    return formats.iter_frequency_vectors(args.file)   # read and projected chunk by chunk, never held whole


def _load_stored(args):
    """One target's vectors of one kind: phases of different programs, or of native IPs and Python
    frames, are not one clustering."""
    from causewatch.analytics.phases.keyed import bbv_matrix
    with open_source(args) as source:
        known = source.read(verbs.BBV_TARGETS)
        chosen = known[known.target == args.target] if args.target else known
        chosen = chosen[chosen.kind == args.kind] if args.kind else chosen
        if len(chosen) != 1:
            listing = "; ".join(f"--target {r.target} --kind {r.kind} ({r.vectors} vectors)"
                                for r in known.itertuples())
            problem = "has no vectors" if known.empty else (
                "has several targets or kinds: choose one" if len(chosen) > 1 else "has no such vectors")
            raise InputError(f"{source.where}: the stored BBVs {problem}" + (f"; known: {listing}" if listing else ""))
        X, _, _ = bbv_matrix(source.read(verbs.BBV, target=chosen.target.iloc[0], kind=chosen.kind.iloc[0]))
        return X


def run(args) -> int:
    from causewatch.analytics.phases import SimPoint, formats
    for flag in ("save_simpoints", "save_weights", "save_labels"):
        check_output(getattr(args, flag), "--" + flag.replace("_", "-"))
    try:
        X = _load(args)
        model = SimPoint(max_k=args.max_k, dim=args.dim, n_init=args.num_init_seeds,
                         max_iter=args.iters, bic_threshold=args.bic_threshold,
                         fixed_length=args.fixed_length == "on", k=args.k, seed=args.seed,
                         init=args.initkm, variance_floor=args.variance_floor).fit(X)
    except formats.PhaseError as e:
        raise InputError(str(e)) from None
    except OSError as e:   # the file is read during fit
        raise InputError(f"{args.file}: cannot read ({e.strerror or e})") from None
    if args.save_simpoints:
        formats.write_simpoints(args.save_simpoints, model.simpoints_)
    if args.save_weights:
        formats.write_weights(args.save_weights, model.weights_)
    if args.save_labels:
        formats.write_labels(args.save_labels, model.labels_, model.distances_)
    result = {"intervals": len(model.labels_), "k": int(model.k_),
              "bic": {str(k): v for k, v in model.bic_.items()},
              "phases": [{"phase": p, "simpoint": int(i), "weight": float(model.weights_[p]),
                          "intervals": int((model.labels_ == p).sum())}
                         for p, i in enumerate(model.simpoints_) if i >= 0]}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['intervals']} intervals, k = {result['k']} (BIC threshold {args.bic_threshold})")
    print("BIC by k: " + "  ".join(f"{k}:{v:.1f}" for k, v in model.bic_.items()))
    print(f"{'phase':>5} {'simpoint':>9} {'weight':>8} {'intervals':>9}")
    for row in result["phases"]:
        print(f"{row['phase']:>5} {row['simpoint']:>9} {row['weight']:>8.4f} {row['intervals']:>9}")
    return 0

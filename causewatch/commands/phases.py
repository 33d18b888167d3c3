"""`causewatch phases`: SimPoint 3 compatible phase clustering of a .bb(.gz) file, or of the BBVs a daemon
stored (read through its HTTP API, or from a stopped daemon's store file).

Prints the chosen k, the BIC of each k tried and per phase its representative interval, its weight and
what it does: its top functions (the keys that weigh most in its centroid, with their share). A .bb file's
keys are block ids; exp-bbv's pc file (--pc-file) names their functions.
"""

from __future__ import annotations

import json
import os
import sys

from causewatch.commands import check_output
from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

EPILOG = """examples:
  valgrind --tool=exp-bbv --bb-out-file=app.bb ./app
  causewatch phases app.bb --max-k 30 --save-simpoints app.simpoints --save-weights app.weights
  valgrind --tool=exp-bbv --bb-out-file=app.bb --pc-out-file=app.pc ./app
  causewatch phases app.bb --pc-file app.pc --top 5          # each phase's 5 top functions, not blocks
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
    parser.add_argument("--variance-floor", type=float, default=1e-3,
                        help="the BIC's variance never falls below this fraction of the variance at k = 1, so "
                             "a loop kernel cut at its loop boundaries, or an interpreter's first pass over a kernel, "
                             "stays one phase (default 1e-3; "
                             "0 with --initkm samp is SimPoint 3.2)")
    parser.add_argument("--target", help="with a DuckDB store: the target whose vectors to cluster "
                                         "(needed when the store has several; a wrong one lists them)")
    parser.add_argument("--kind", choices=("native", "python"),
                        help="with a DuckDB store: native IP samples or Python frames (needed when both)")
    parser.add_argument("--save-simpoints", metavar="F", help="write '<interval> <phase>' lines")
    parser.add_argument("--save-weights", metavar="F", help="write '<weight> <phase>' lines")
    parser.add_argument("--save-labels", metavar="F", help="write '<phase> <distance>' per interval")
    parser.add_argument("--top", type=int, default=3, metavar="N",
                        help="name each phase's N top functions, with their share of it (default 3; 0: none)")
    parser.add_argument("--pc-file", metavar="F",
                        help="exp-bbv's --pc-out-file for a .bb file: name blocks by their functions")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _stored(args) -> bool:
    return args.file is None or args.file.endswith((".duckdb", ".db"))


def _load(args):
    """(the vectors, their keys' names): a stored target's (function names), or a .bb file's chunks (the
    pc file's function of each block, else None: blocks by id)."""
    if _stored(args):
        if args.pc_file:
            raise InputError("--pc-file applies only to a .bb file: stored BBVs name their functions")
        args.db = args.db or args.file
        return _load_stored(args)
    if args.target or args.kind:
        raise InputError("--target and --kind apply only to the BBVs a daemon stored, not to a .bb file")
    from causewatch.analytics.phases import formats
    names = None
    if args.pc_file:
        try:
            names = formats.read_pc_functions(args.pc_file)
        except OSError as e:
            raise InputError(f"--pc-file {args.pc_file}: cannot read ({e.strerror or e})") from None
    return formats.iter_frequency_vectors(args.file), names   # read and projected chunk by chunk, never held whole


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
        X, keys, _ = bbv_matrix(source.read(verbs.BBV, target=chosen.target.iloc[0], kind=chosen.kind.iloc[0]))
        return X, keys


def run(args) -> int:
    # The fit is single-threaded, as SimPoint's is, and OpenBLAS's idle pool spins beside it from numpy's
    # import on: 0.06-0.1 CPU-s on this 2-CPU machine, a sixth of a short run (docs/phases.md). It counts
    # only before numpy loads (not in a caller that already has it); the caller's own setting wins.
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from causewatch.analytics.phases import SimPoint, formats
    from causewatch.analytics.phases.mix import phase_rows, top_functions
    for flag in ("save_simpoints", "save_weights", "save_labels"):
        check_output(getattr(args, flag), "--" + flag.replace("_", "-"))
    if args.top < 0:
        raise InputError(f"--top {args.top}: give a count >= 0")
    try:
        X, names = _load(args)
        if hasattr(X, "__next__") and args.top:
            X = _Kept(X)
        model = SimPoint(max_k=args.max_k, dim=args.dim, n_init=args.num_init_seeds,
                         max_iter=args.iters, bic_threshold=args.bic_threshold,
                         fixed_length=args.fixed_length == "on", k=args.k, seed=args.seed,
                         init=args.initkm, variance_floor=args.variance_floor).fit(X)
        # a file was read chunk by chunk into the projection: its counts are kept when small, else read once more
        again = (iter(X.chunks) if X.chunks is not None else formats.iter_frequency_vectors(args.file)) \
            if isinstance(X, _Kept) else X
        tops = top_functions(model, again, names, args.top) if args.top else None
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
    keys = "functions" if _stored(args) or names else "blocks"
    result = {"intervals": len(model.labels_), "k": int(model.k_),
              "bic": {str(k): v for k, v in model.bic_.items()}, "keys": keys,
              "phases": phase_rows(model, tops)}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['intervals']} intervals, k = {result['k']} (BIC threshold {args.bic_threshold})")
    print("BIC by k: " + "  ".join(f"{k}:{v:.1f}" for k, v in model.bic_.items()))
    print("\n".join(phase_table(result["phases"], keys)))
    if tops and keys == "blocks":
        print("(blocks are the .bb file's ids: --pc-file with exp-bbv's --pc-out-file names their functions)")
    return 0


class _Kept:
    """A .bb file's chunks as they are read, kept for the second pass (the phases' top keys) while they
    hold at most `budget` bytes, then dropped: a short recording's second read would cost as much as the
    first (a 10 MB interpreter recording: 0.25 of 1.0 CPU-s), a long one's counts are not held whole."""

    def __init__(self, chunks, budget: int = 32 << 20):
        self._chunks, self.chunks, self._left = chunks, [], budget

    def __iter__(self):
        return self

    def __next__(self):
        rows = next(self._chunks)
        if self.chunks is not None:
            self._left -= rows.indices.nbytes + rows.data.nbytes + rows.indptr.nbytes
            if self._left >= 0:
                self.chunks.append(rows)
            else:
                self.chunks = None
        return rows


def phase_table(rows: list[dict], keys: str = "functions") -> list[str]:
    """The phases as text lines: a row per phase, its top functions one a line beside it (names are
    never cut: a long symbol is what tells a phase apart)."""
    tops = any("top" in row for row in rows)
    lines = [f"{'phase':>5} {'simpoint':>9} {'weight':>8} {'intervals':>9}"
             + (f"  top {keys} (share of the phase)" if tops else "")]
    for row in rows:
        head = f"{row['phase']:>5} {row['simpoint']:>9} {row['weight']:>8.4f} {row['intervals']:>9}"
        shown = [t for i, t in enumerate(row.get("top", [])) if i == 0 or t["share"] >= 0.0005]   # not "0.0 %"
        named = [f"{100 * t['share']:5.1f} %  {t['key']}" for t in shown] or [""]
        lines.append(f"{head}  {named[0]}".rstrip())
        lines += [f"{'':{len(head)}}  {line}" for line in named[1:]]
    return lines

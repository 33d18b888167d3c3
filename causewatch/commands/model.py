"""`causewatch model`: a learned causal model of the daemon (newest, or one version), its history,
and pinning a version as the baseline anomalies are judged against.

Reads a running daemon's HTTP API (--daemon) or a stopped daemon's store (--db).
"""

from __future__ import annotations

import json
from pathlib import Path

from causewatch.commands import check_output
from causewatch.commands.source import add_source_arguments, open_source
from causewatch.daemon import verbs
from causewatch.errors import InputError

EPILOG = """examples:
  causewatch model                            # the newest model (of the only scope)
  causewatch model --scope app:lu --json
  causewatch model --scope app:lu --dot lu.dot --svg lu.svg   # open anomalies drawn in red
  causewatch model --scope app:lu --history   # every version, the baseline marked
  causewatch model --scope app:lu --pin 7     # judge anomalies against version 7 from now on
"""


def add_arguments(parser) -> None:
    parser.add_argument("--scope", help="whose model, e.g. app:lu, or app:lu@job:42 (one Slurm job's "
                        "tasks; with --history, job:42: every scope of that job) (needed when the daemon has several)")
    parser.add_argument("--model-id", type=int, metavar="N", help="this version instead of the newest")
    parser.add_argument("--history", action="store_true", help="list the versions instead")
    parser.add_argument("--pin", type=int, metavar="N", help="make version N the scope's baseline")
    parser.add_argument("--dot", metavar="FILE", help="also write the graph as Graphviz DOT")
    parser.add_argument("--svg", metavar="FILE", help="also draw the graph as SVG (edge width by strength, "
                                                     "open anomalies marked; Graphviz dot when installed)")
    add_source_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the model as JSON")


def run(args) -> int:
    drawn = [flag for flag, given in (("--svg", args.svg), ("--dot", args.dot)) if given]
    other = [flag for flag, given in (("--history", args.history), ("--pin", args.pin is not None)) if given]
    if drawn and other:   # those two show no one model, and would write nothing
        raise InputError(f"{drawn[0]} draws one model and {other[0]} shows none: drop one of them "
                         "(--model-id N draws that version)")
    check_output(args.dot, "--dot")
    check_output(args.svg, "--svg")
    with open_source(args) as source:
        if args.pin is not None:
            if not args.scope:
                raise InputError("--pin needs --scope")
            source.write(verbs.BASELINE, scope=args.scope, model_id=args.pin)
            print(f"baseline of {args.scope}: model {args.pin}")
            return 0
        if args.history:
            return _history(source.read(verbs.MODELS, scope=args.scope), args.json)
        found = source.read(verbs.MODEL, scope=args.scope, model_id=args.model_id)
        # drawn where the model is read (the daemon's API worker: the CLI loads no analytics), this version
        for fmt, path in (("dot", args.dot), ("svg", args.svg)):
            if path:
                Path(path).write_text(source.read(verbs.MODEL, scope=found["scope"], model_id=found["model_id"],
                                                  format=fmt))
    return _show(found, args)


def _history(versions: list[dict], as_json: bool) -> int:
    if as_json:
        print(json.dumps(versions, indent=2))
        return 0
    print(f"{'model':>6} {'scope':<20} {'rows':>6} {'edges':>6}  baseline")
    for v in versions:
        print(f"{v['model_id']:>6} {v['scope']:<20.20} {v['n_rows']:>6} {v['edges']:>6}  "
              f"{'yes' if v['baseline'] else ''}")
    return 0


def _show(found: dict, args) -> int:
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    base = found.get("baseline")
    edges = sorted(found["edges"], key=lambda e: (e["src"], e["dst"]))   # as CausalModel.edges() lists them
    print(f"{found['scope']} model {found['model_id']}: {len(found['nodes'])} variables, {len(edges)} edges; "
          + (f"baseline model {base['model_id']} ({base['how']})" if base else "no baseline yet"))
    if not base:
        print(f"  the baseline waits for: {found.get('baseline_waits_for') or 'the next model version'}")
    for e in edges:
        print(f"  {e['src']} {'-->' if e['directed'] else '---'} {e['dst']}   ({e.get('strength', 0.0):.3f} bits)")
    for v, sub in found.get("submodels", {}).items():
        print(f"  {sub['formula']}   [{sub['kind']}, {sub['bits']} bits]")
    return 0

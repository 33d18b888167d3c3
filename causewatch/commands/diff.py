"""`causewatch diff`: a causal diff of two windows (analytics/causal/diff.py): a model learnt on each, and
which edges, strengths and mechanisms changed from the baseline window's to the other's, as a table, JSON
or a picture; the windows are two files, or two time ranges of an app's tasks in a daemon's store
(commands/diff_store.py)."""

from __future__ import annotations

import json
from pathlib import Path

from causewatch.commands import check_output, waiting
from causewatch.commands.source import add_source_arguments
from causewatch.errors import InputError

EPILOG = """examples:
  causewatch diff --baseline calm.csv --incident slow.csv --inputs n,kind --svg diff.svg
  causewatch diff --baseline duckdb:runs.duckdb:calm --incident duckdb:runs.duckdb:slow --json
  causewatch diff --db cw.duckdb --scope app:lu                  # its baseline model's window against the newest's
  causewatch diff --daemon http://HOST:9464 --scope app:lu --baseline-window 1767225600,1767229200 \\
      --incident-window 1767229500,1767229800 --svg lu-diff.svg

Each file window is a .csv / .parquet file or duckdb:FILE:TABLE with the same columns (a first column
named time, timestamp or unix_timestamp is the rows' time, not a variable). From a store (--db FILE,
--daemon URL or --daemons) the windows are an app's tasks (--scope app:APP) that started in each
START,END (seconds since the epoch); without --baseline-window, the window of the scope's baseline model,
without --incident-window, that of its newest model; the task parameters are inputs.

A model is learnt on each window as the daemon's causal job learns one (PC-stable, the KDE test,
--inputs only as causes); the changes are judged as its anomalies are: an edge of at least 0.1 bits added
or removed (and shown in the rows: else listed as unconfirmed), a strength moved by more than 0.05 bits
and a factor 2, an orientation changed (listed, not a new edge, no change by itself), a variable's
distribution given its baseline causes changed between the windows (its fit on its causes in each shown).
--json: {"changed", "edges": [{kind, src, dst, before, after}],
"mechanisms": [{variable, given, bits, threshold, before, after, formula_before, formula_after}], ...}.
"""


def add_arguments(parser) -> None:
    parser.add_argument("--baseline", metavar="DATA", help="the baseline window: CSV, Parquet or duckdb:FILE:TABLE")
    parser.add_argument("--incident", metavar="DATA", help="the window to compare with it, same columns")
    parser.add_argument("--scope", help="from a store: the app whose tasks are the windows (app:APP)")
    parser.add_argument("--baseline-window", metavar="START,END", help="from a store: the baseline's time range "
                        "(seconds since the epoch; default: the window of the scope's baseline model)")
    parser.add_argument("--incident-window", metavar="START,END", help="from a store: the other time range "
                        "(default: the window of the scope's newest model)")
    add_source_arguments(parser)
    parser.add_argument("--columns", help="comma-separated variables to use (default: all usable)")
    parser.add_argument("--inputs", default="", help="comma-separated input columns: causes only, their own "
                        "mechanisms not judged (a store's task parameters always are)")
    parser.add_argument("--discrete", default="", help="comma-separated discrete columns (text columns always are)")
    parser.add_argument("--max-depth", type=int, default=2, help="largest conditioning set (default 2, the daemon's)")
    parser.add_argument("--svg", metavar="FILE", help="also draw the diff: the newer model, its changes marked")
    parser.add_argument("--json", action="store_true", help="print the diff as JSON")


def _names(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def _windows(args):
    """(baseline rows, incident rows, inputs, what they are) from the two files or the store."""
    files = (args.baseline, args.incident)
    stored = args.scope or args.baseline_window or args.incident_window or args.db or args.daemons
    if all(files) and not stored:
        from causewatch.commands.diagnose import read_window
        return (read_window(args.baseline, "baseline"), read_window(args.incident, "incident"), [],
                f"{args.baseline} -> {args.incident}")
    if not any(files) and args.scope:
        from causewatch.commands.diff_store import store_windows
        return store_windows(args)
    if any(files) and not all(files):
        given, other = ("baseline", "incident") if args.baseline else ("incident", "baseline")
        raise InputError(f"--{given} needs --{other}: the two windows' files")
    if all(files):
        raise InputError("give the windows as files (--baseline, --incident) or from a store (--scope), not both")
    raise InputError("give two windows: --baseline and --incident files, or a store's app with --scope app:APP")


def variables(before, after, inputs: list[str], columns: list[str] | None = None, discrete: list[str] = ()):
    """Both windows on the same variables (features.model_variables over their rows together, less
    any column constant in one of them), complete rows only; with the inputs among them."""
    import pandas as pd

    from causewatch.analytics.causal import features
    drop = tuple(c for c in features.BOOKKEEPING if c in before.columns)
    for flag, names in (("--columns", columns or []), ("--inputs", inputs), ("--discrete", discrete)):
        missing = [c for c in names if c not in before.columns or c not in after.columns]
        if missing:
            raise InputError(f"{flag}: no column(s) {', '.join(missing)} in both windows")
    chosen = list(features.model_variables(pd.concat([before, after], ignore_index=True), columns, drop).data.columns)
    rows = [w[chosen].dropna().reset_index(drop=True) for w in (before, after)]
    chosen = [c for c in chosen if all(r[c].nunique() > 1 for r in rows)]
    if len(chosen) < 2:
        raise InputError(f"need at least 2 variables that vary in both windows; got {', '.join(chosen) or 'none'}")
    return rows[0][chosen], rows[1][chosen], [c for c in inputs if c in chosen]


def learnt(before, after, inputs: list[str], columns: list[str] | None = None, discrete: list[str] = (),
           max_depth: int = 2, quiet: bool = True):
    """The diff of two windows' rows on their shared variables; windows that cannot be compared: an InputError."""
    from causewatch.analytics.causal import DiffError, diff_windows
    before, after, given = variables(before, after, inputs, columns, discrete)
    try:
        with waiting("learning two models", quiet):
            return diff_windows(before, after, given, list(discrete), max_depth)
    except DiffError as e:
        raise InputError(str(e)) from None


def diff(args):
    """The diff of the two windows and what they were."""
    before, after, inputs, what = _windows(args)
    missing = sorted(set(before.columns) ^ set(after.columns))
    if missing and not args.scope:
        raise InputError(f"the windows' columns disagree: {', '.join(missing[:5])} in one only")
    inputs = list(dict.fromkeys([*inputs, *_names(args.inputs)]))
    return learnt(before, after, inputs, _names(args.columns) or None, _names(args.discrete), args.max_depth,
                  args.json or getattr(args, "quiet", False)), what


def print_diff(found, what: str) -> None:
    before, after = found.rows
    print(f"causal diff {what}: {before} and {after} rows, {len(found.after.nodes)} variables")
    if not found.changed:
        print("  no change beyond the bands" + (" (orientations aside)" if found.edges else ""))
    for c in found.edges:
        b, a = c.before, c.after
        arrow = {True: "-->", False: "---"}
        if c.kind == "added":
            print(f"  added       {a.src} {arrow[a.directed]} {a.dst}   ({a.strength:.3f} bits)")
        elif c.kind == "removed":
            print(f"  removed     {b.src} {arrow[b.directed]} {b.dst}   ({b.strength:.3f} bits)")
        elif c.kind == "reoriented":
            print(f"  reoriented  {b.src} {arrow[b.directed]} {b.dst}  is now  {a.src} {arrow[a.directed]} {a.dst}")
        else:
            print(f"  strength    {c.src} --- {c.dst}   {b.strength:.3f} -> {a.strength:.3f} bits")
    if found.unconfirmed:
        print(f"  ({len(found.unconfirmed)} edge(s) added or removed in the graphs only, not in the rows: --json)")
    for m in found.mechanisms:
        print(f"  mechanism   {m.variable} given {', '.join(m.given) or 'nothing'}: {m.bits:.3f} bits > "
              f"{m.threshold:.3f}; typical {m.before} -> {m.after}")
        print(f"              {m.formula_before}  ->  {m.formula_after}")


def run(args) -> int:
    check_output(args.svg, "--svg")
    found, what = diff(args)
    if args.svg:
        from causewatch.analytics.causal import diff_svg
        Path(args.svg).write_text(diff_svg(found, title=f"causal diff {what}"))
    if args.json:
        print(json.dumps(found.to_dict(), indent=1))
    else:
        print_diff(found, what)
    return 0

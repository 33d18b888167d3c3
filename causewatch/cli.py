"""causewatch: runtime performance monitoring for clusters — agents, a daemon, causal models, probes.

Run `causewatch COMMAND --help` for a command's options and examples.
"""

# The entry point stays light: the command table names modules as strings and only the chosen
# command's module is imported, so `--version` and `--help` never load numpy, pandas or duckdb.

from __future__ import annotations

import argparse
import importlib
import os
import sys

from causewatch import __version__
from causewatch.errors import CausewatchError, explain

# verb -> (module, one line of help); the module defines EPILOG, add_arguments(parser) and run(args)
COMMANDS: dict[str, tuple[str, str]] = {
    "agent": ("causewatch.commands.agent",
              "run the node agent: counters, metrics, phase vectors and task records to the daemon"),
    "daemon": ("causewatch.commands.daemon",
               "run the daemon: ZeroMQ ingest into DuckDB, analysis jobs, /metrics and /api"),
    "keys": ("causewatch.commands.keys", "make CURVE key pairs and authorize agents"),
    "demo": ("causewatch.commands.demo",
             "run a daemon, an agent and a workload end to end, then report what was learned"),
    "query": ("causewatch.commands.query", "search code regions with a fuzzy PERFQL query"),
    "range": ("causewatch.commands.range", "stored samples over a time range: per series or aggregated, or PromQL"),
    "bottlenecks": ("causewatch.commands.bottlenecks", "list bottleneck regions with fuzzy severity degrees"),
    "learn": ("causewatch.commands.learn", "learn a causal model from CSV, Parquet or a DuckDB table"),
    "experiment": ("causewatch.commands.experiment",
                   "run a program over random parameter draws, record its counters, learn a causal model"),
    "phases": ("causewatch.commands.phases", "cluster basic block vectors into program phases"),
    "probe": ("causewatch.commands.probe", "software probe kits: build, run on a node, register"),
    "rank": ("causewatch.commands.rank", "rank nodes for an application by predicted task time"),
    "broker": ("causewatch.commands.broker",
               "tell HTCondor or Slurm the ranking: slot attributes, node weights and features"),
    "nodes": ("causewatch.commands.nodes", "list the nodes whose agents report, with their facts"),
    "model": ("causewatch.commands.model", "show a learned causal model, its history, or pin a baseline"),
    "anomalies": ("causewatch.commands.anomalies", "list dependency anomalies against the baseline models"),
    "jobs": ("causewatch.commands.jobs", "list the jobs (or services, containers) the agents followed, per user"),
    "job": ("causewatch.commands.job", "a job's efficiency report: CPU and memory against its allocation, I/O, "
                                       "pressure"),
    "diagnose": ("causewatch.commands.diagnose",
                 "rank the units that may have caused an incident, from a baseline and an incident window"),
    "diff": ("causewatch.commands.diff",
             "a causal diff of two windows: the edges, strengths and mechanisms that changed, as JSON or SVG"),
}
VERBOSE, QUIET = ("-v", "--verbose", "-vv", "-vvv"), ("-q", "--quiet")
EPILOG = """getting started:
  causewatch demo                                   # everything on this machine, then a report
  causewatch daemon --db cw.duckdb                  # the daemon on loopback
  causewatch agent --daemon tcp://HOST:5555 -- ./solver --size 4096
  causewatch bottlenecks --db cw.duckdb             # where the time goes

-v / -q may stand anywhere on the line (before a `--` that starts a launched command)."""


def split_verbosity(argv: list[str]) -> tuple[int, list[str]]:
    """Take -v/-q out of `argv` wherever they stand (up to `--`); returns (verbosity, the rest)."""
    level, rest = 0, []
    for i, arg in enumerate(argv):
        if arg == "--":
            return level, rest + argv[i:]
        if arg in VERBOSE:
            level += 1 if arg == "--verbose" else len(arg) - 1
        elif arg in QUIET:
            level = -1
        else:
            rest.append(arg)
    return level, rest


def _verb(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def load_command(verb: str):
    """The module of `verb`; a missing optional library becomes an error that says what to install."""
    try:
        return importlib.import_module(COMMANDS[verb][0])
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "causewatch":
            raise
        raise CausewatchError(f"needs {e.name}, which this install lacks; install the full set with "
                              f"pip install 'causewatch[all]'") from None


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `verb`'s sub-parser gets its options (and so its module imported)."""
    parser = argparse.ArgumentParser(prog="causewatch", description=__doc__.splitlines()[0], epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"causewatch {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="errors only, no progress bars")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (_, line) in COMMANDS.items():
        p = sub.add_parser(name, help=line, description=line, formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == verb:
            module = load_command(name)
            p.epilog = module.EPILOG
            p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                           help="more log output, anywhere on the line (-vv for debug)")
            p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                           help="errors only, no progress bars")
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    level, argv = split_verbosity(sys.argv[1:] if argv is None else list(argv))
    verb = _verb(argv)
    try:
        parser = build_parser(verb if verb in COMMANDS else None)
    except CausewatchError as e:
        print(f"causewatch {verb}: error: {e}", file=sys.stderr)
        return 2
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):   # only global flags
        parser.print_help()
        return 0
    import logging  # not needed for --version and --help
    args.verbose, args.quiet = max(level, 0), level < 0
    logging.basicConfig(level=[logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG][min(level + 1, 3)],
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args._run(args) or 0
    except CausewatchError as e:
        print(f"causewatch {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:     # `causewatch … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:   # a known library failure (port in use, locked store …) gets a sentence
        message = explain(e)
        if message is None:
            raise
        print(f"causewatch {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

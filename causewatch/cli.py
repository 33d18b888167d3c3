"""The `causewatch` entry point: one sub-command per module of causewatch.commands.

Bad input exits with code 2 and a message that names the bad thing; --help shows examples.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys

from causewatch import __version__, commands
from causewatch.errors import CausewatchError


class _Unavailable:
    """Stands in for a command whose module cannot be imported, so the other commands still work."""

    def __init__(self, error: ImportError):
        self.HELP = f"unavailable: {error}"
        self.error = error

    def add_arguments(self, parser):
        parser.add_argument("rest", nargs=argparse.REMAINDER)

    def run(self, args):
        raise CausewatchError(f"this command cannot load: {self.error}")


def _command_modules(argv=()):
    """The module of the command argv names, alone (a command then starts without importing what
    the others need: `causewatch phases` runs in tenths of a second), else every command's module."""
    names = sorted(i.name for i in pkgutil.iter_modules(commands.__path__) if not i.name.startswith("_"))
    named = next((a for a in argv if not a.startswith("-")), "").replace("-", "_")
    for name in [named] if named in names else names:
        try:
            module = importlib.import_module(f"{commands.__name__}.{name}")
        except ImportError as e:
            module = _Unavailable(e)
        yield name.replace("_", "-"), module


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only the command `argv` names."""
    parser = argparse.ArgumentParser(prog="causewatch", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"causewatch {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _command_modules(argv or ()):
        p = sub.add_parser(name, help=module.HELP, description=module.HELP,
                           epilog=getattr(module, "EPILOG", None),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        return args._run(args) or 0
    except CausewatchError as e:
        print(f"causewatch {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

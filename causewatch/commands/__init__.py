"""One module per `causewatch` sub-command, named in causewatch.cli.COMMANDS.

Each module defines EPILOG (examples), add_arguments(parser) and run(args) -> int; it imports heavy
libraries (numpy, pandas, duckdb, the analytics) inside run, so `--help` stays fast.
"""

import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from causewatch.errors import InputError


def check_output(path: str | None, flag: str, folder: bool = False) -> None:
    """Refuse an output path that cannot be written, before the long work that would produce it.

    A file needs an existing, writable parent folder; a folder (`folder=True`) is created if missing,
    so its nearest existing ancestor must be a writable folder.
    """
    if path is None:
        return
    p = Path(path).expanduser()
    if p.exists() and (p.is_dir() != folder or not os.access(p, os.W_OK)):
        kind = "a folder" if folder else "a file"
        raise InputError(f"{flag} {path}: cannot write there (expected {kind} you may write)")
    parent = p.parent
    while folder and not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InputError(f"{flag} {path}: folder {parent} does not exist or is not writable; choose another path")


@contextmanager
def waiting(label: str, quiet: bool = False):
    """A tqdm line ticking the elapsed seconds while a step that reports no progress of its own runs
    (on a terminal only, and not with -q or --json)."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    from tqdm import tqdm
    done = threading.Event()

    def tick():
        while not done.wait(0.5):
            bar.refresh()

    with tqdm(desc=label, bar_format="{desc} … {elapsed}", file=sys.stderr) as bar:
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()

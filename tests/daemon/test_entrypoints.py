"""The seams between the daemon and its worker processes: every calls.Entry key resolves to a function
registered by reference, every calls.Ask has a handler in worker.Host, and no daemon module names an entry
point by a "module:function" string (a probe kit's worker callable is data, not a daemon seam)."""

import ast
import importlib
import re
import subprocess
import sys

import pytest
from support import product_files

from causewatch.daemon import entrypoints, worker
from causewatch.daemon.calls import Ask, Entry
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.worker import Host


def test_every_entry_key_resolves_to_a_registered_function():
    assert importlib.import_module(worker.ENTRYPOINTS) is entrypoints
    assert set(entrypoints.ENTRY_POINTS) == set(Entry)
    for key in Entry:
        fn = worker.resolve(key)
        assert callable(fn) and fn is entrypoints.ENTRY_POINTS[key], key


def test_what_the_fork_server_preloads_imports_and_holds_the_registry():
    """The fork server ignores an ImportError in its preload (each worker would then load its own copy)."""
    for name in worker.PRELOAD:
        assert importlib.import_module(name)
    assert importlib.import_module(worker.PRELOAD[0]).entrypoints is entrypoints


@pytest.mark.slow   # a fresh interpreter loads the whole analysis stack
def test_the_preload_starts_no_thread_pool():
    """The fork server forks the workers after its preload: numba's parallel thread pool, or any thread,
    must not exist there yet (a forked child would inherit a pool without its threads)."""
    code = ("import threading, causewatch.daemon.preload; from numba.np.ufunc import parallel; "
            "print(parallel._is_initialized, threading.active_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "1"], out.stderr


def test_every_ask_has_a_handler_and_an_unknown_one_is_named():
    host = Host(cursor=None, write=print, send=print, exporter=Exporter())
    assert set(host.handlers) == set(Ask)
    with pytest.raises(worker.WorkerError, match="'sql'.*rows, arrow, write, read, send, publish"):
        host("sql")


REFERENCE = re.compile(r"^causewatch(\.\w+)+:\w+$")


def test_no_entry_point_is_named_by_a_module_function_string():
    offenders = [f"{rel}:{node.lineno}: {node.value!r}" for rel, path in product_files()
                 if rel.startswith("causewatch/daemon/") for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and REFERENCE.match(node.value)]
    assert not offenders, "entry points named by strings:\n" + "\n".join(offenders)
    assert REFERENCE.match("causewatch.daemon.routes:answer")

"""The walls that import-linter cannot see: SQL against the daemon's tables only in its readers
(daemon/readers/) and writers (daemon/store/); project imports at module top outside the CLI's
commands (a function-local import hides a passage between parts); no tracker numbers, paths beside
the checkout or DuckDB reading Python locals by name in what a clone ships."""

import ast
import re
import subprocess
import sys

import pytest
from support import ROOT, product_files

from causewatch.daemon.store.schema import TABLES

STORE_OWNERS = ("causewatch/daemon/store/", "causewatch/daemon/readers/")
SQL = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE)\s+(" + "|".join(TABLES) + r")\b", re.IGNORECASE)


def test_sql_against_the_store_tables_only_in_its_readers_and_writers():
    offenders = []
    for rel, path in product_files():
        if rel.startswith(STORE_OWNERS):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef,
                      ast.FunctionDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value) \
                    and id(node) not in docstrings:
                offenders.append(f"{rel}:{node.lineno}: {node.value.strip()[:60]!r}")
    assert not offenders, "SQL against the store outside daemon/readers/ and daemon/store/:\n" + "\n".join(offenders)


def test_no_function_local_project_imports_outside_the_commands():
    offenders = []
    for rel, path in product_files():
        if rel.startswith("causewatch/commands/"):
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                if any(n == "causewatch" or n.startswith("causewatch.") for n in names):
                    offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "function-local project imports:\n" + "\n".join(offenders)


def test_the_walls_test_sees_what_it_forbids():
    assert SQL.search("SELECT count(*) FROM ingest_log") and SQL.search("INSERT INTO scores (ts) VALUES (1)")
    assert not SQL.search("the samples from the agents")
    assert {rel for rel, _ in product_files()} >= {"causewatch/daemon/readers/models.py",
                                                   "causewatch/daemon/store/frames.py",
                                                   "causewatch/agent/runner.py", "causewatch/cli.py"}


def test_the_walls_test_guards_every_table_of_the_schema():
    """The regex is built from the schema's own table list: tables added by later migrations (the
    baselines, the per-minute aggregates) are guarded too."""
    assert SQL.search("SELECT model_id FROM baselines WHERE scope = ?")
    assert SQL.search("DELETE FROM samples_minute WHERE minute < ?")
    assert all(SQL.search(f"SELECT * FROM {table}") for table in TABLES)


# each pattern assembled from parts, so that this file does not match it
TRACKER_NUMBER = re.compile(r"\b" + "iss" + r"ues? #?[0-9]+", re.IGNORECASE)   # the tracker is not in the repository
BESIDE_CHECKOUT = re.compile(re.escape(".." + "/shared/"))   # a clone has no such folder
LOCAL_BY_NAME = re.compile("noqa: " + "F841")   # a local kept for DuckDB's replacement scan
TREES = ("causewatch", "tests", "docs", "README.md")


def _offenders(pattern: re.Pattern, trees) -> list[str]:
    """path:line of each match in the text files under `trees` (files and folders of the checkout)."""
    found = []
    for tree in trees:
        top = ROOT / tree
        for path in sorted([top] if top.is_file() else top.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:   # recordings, gzip
                continue
            found += [f"{path.relative_to(ROOT)}:{n}: {line.strip()[:80]}"
                      for n, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    return found


def test_no_tracker_numbers_in_the_product_tests_or_docs():
    """Say what was meant, not which issue it was: the tracker is not part of a clone."""
    offenders = _offenders(TRACKER_NUMBER, TREES)
    assert not offenders, "tracker numbers:\n" + "\n".join(offenders)


def test_no_paths_beside_the_checkout_in_the_product_or_docs():
    """The shared data lies beside a checkout, not in a clone: the product and docs say what it is; tests
    reach it through support.shared_data."""
    offenders = _offenders(BESIDE_CHECKOUT, ("causewatch", "docs", "README.md"))
    assert not offenders, "paths beside the checkout:\n" + "\n".join(offenders)


def test_no_python_locals_read_by_name_in_sql():
    """Arrow tables reach DuckDB by con.register or from_arrow: a rename cannot break SQL silently."""
    offenders = _offenders(LOCAL_BY_NAME, ("causewatch",))
    assert not offenders, "locals kept for a replacement scan:\n" + "\n".join(offenders)


def test_the_text_walls_see_what_they_forbid():
    word = "Iss" + "ue"
    assert TRACKER_NUMBER.search(f"a heading ({word} #27)") and TRACKER_NUMBER.search(f"{word}s 12 and 14")
    assert not TRACKER_NUMBER.search(f"the branch {word}27-series, t{word} 3")
    assert BESIDE_CHECKOUT.search("(`.." + "/shared/papers/x.txt`)") and not BESIDE_CHECKOUT.search("/shared/lake")
    assert LOCAL_BY_NAME.search("batch = t  # noqa" + ": F841 (DuckDB reads it by name)")


HEAVY = ("numba", "llvmlite", "scipy", "pandas", "networkx", "sklearn", "causewatch.analytics",
         "causewatch.daemon.readers", "distributed")


@pytest.mark.slow   # fresh interpreters load the daemon's and the workers' stacks
def test_the_ingesting_daemon_loads_no_analysis_stack():
    """The daemon process imports what ingest needs; the analyses and the /api routes run in its spawned
    workers (import-linter checks the project modules; this, in a fresh interpreter, the libraries)."""
    code = f"import sys, causewatch.daemon.server; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the daemon process loads {out.stdout.strip()}"
    jobs = code.replace("causewatch.daemon.server", "causewatch.daemon.entrypoints")
    out = subprocess.run([sys.executable, "-c", jobs], capture_output=True, text=True, timeout=120)
    assert "pandas" in out.stdout   # the check sees a module that does load them
    # the fork server loads what the workers share; a Dask client only a jobs worker with a scheduler to use
    assert "distributed" not in out.stdout

"""The walls that import-linter cannot see: SQL against the daemon's tables only in its readers
(daemon/readers/) and writers (daemon/store/); project imports at module top outside the CLI's
commands (a function-local import hides a passage between parts)."""

import ast
import re
import subprocess
import sys

import pytest
from support import product_files

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

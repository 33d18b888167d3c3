"""The walls that import-linter cannot see: SQL against the daemon's tables only in its reader
(daemon/tables.py) and writer (daemon/store.py); project imports at module top outside the CLI's
commands (a function-local import hides a passage between parts)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARTS = ["agent", "daemon", "analytics", "probe", "causewatch"]
STORE_OWNERS = {"daemon/store.py", "daemon/tables.py"}
TABLES = ("nodes", "samples", "bbv", "tasks", "regions", "models", "edges", "anomalies", "scores", "probe_kits",
          "probe_results", "ingest_log", "schema_version")
SQL = re.compile(r"\b(FROM|INTO|UPDATE|JOIN|TABLE)\s+(" + "|".join(TABLES) + r")\b", re.IGNORECASE)


def product_files():
    for part in PARTS:
        for path in sorted((ROOT / part).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def test_sql_against_the_store_tables_only_in_its_reader_and_writer():
    offenders = []
    for rel, path in product_files():
        if rel in STORE_OWNERS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef,
                      ast.FunctionDef, ast.AsyncFunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value) \
                    and id(node) not in docstrings:
                offenders.append(f"{rel}:{node.lineno}: {node.value.strip()[:60]!r}")
    assert not offenders, "SQL against the store outside daemon/tables.py and daemon/store.py:\n" + "\n".join(offenders)


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
    assert {rel for rel, _ in product_files()} >= {"daemon/tables.py", "agent/runner.py", "causewatch/cli.py"}


HEAVY = ("numba", "llvmlite", "scipy", "pandas", "networkx", "sklearn", "causewatch.analytics",
         "causewatch.daemon.tables")


def test_the_ingesting_daemon_loads_no_analysis_stack():
    """The daemon process imports what ingest needs; the analyses and the /api routes run in its spawned
    workers (import-linter checks the project modules; this, in a fresh interpreter, the libraries)."""
    code = f"import sys, causewatch.daemon.server; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the daemon process loads {out.stdout.strip()}"
    out = subprocess.run([sys.executable, "-c", code.replace("causewatch.daemon.server", "causewatch.daemon.analysis")],
                         capture_output=True, text=True, timeout=120)
    assert "pandas" in out.stdout   # the check sees a module that does load them

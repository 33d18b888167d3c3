"""The entry point: every command loads and answers --help with examples; -v/-q anywhere; a light start.

`--version` and `--help` must not import the heavy libraries (checked in a fresh interpreter).
"""

import importlib
import subprocess
import sys

import pytest
from support import run_cli

from causewatch.cli import COMMANDS, build_parser, main, split_verbosity

HEAVY = ("numpy", "pandas", "duckdb", "numba", "scipy", "pyarrow", "networkx", "prometheus_client")


def test_the_designed_commands_exist():
    assert {"daemon", "agent", "keys", "demo"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_module_imports(name):
    """A broken command fails here instead of hiding behind the lazy table."""
    module = importlib.import_module(COMMANDS[name][0])
    assert callable(module.run) and callable(module.add_arguments) and "examples:" in module.EPILOG


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_examples(name, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser(name).parse_args([name, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "examples:" in out and f"causewatch {name}" in out and "--verbose" in out


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["learn", "--help"], ["bottlenecks", "--help"],
                                  ["phases", "--help"], ["experiment", "--help"], ["daemon", "--help"], []])
def test_version_and_help_load_no_heavy_library(argv):
    assert _loaded(argv, HEAVY) == "[]"


def _loaded(argv: list[str], modules: tuple[str, ...]) -> str:
    """Which of `modules` `causewatch ARGV` has imported when it is done, in a fresh interpreter."""
    code = ("import sys\nfrom causewatch.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in %r if m in sys.modules))" % (argv, modules))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


# What a data verb's --help needs of the daemon is two defaults (causewatch/defaults.py), not the config
# that takes them, which loads TOML, dataclasses and the shards' hashing.
CONFIG = ("causewatch.config", "tomllib", "dataclasses")


@pytest.mark.parametrize("verb", ["query", "bottlenecks", "anomalies", "rank", "nodes", "model", "learn", "phases"])
def test_a_data_verbs_help_loads_no_config(verb):
    assert _loaded([verb, "--help"], CONFIG) == "[]"


def test_bare_causewatch_lists_the_verbs():
    r = run_cli(timeout=60)
    assert r.returncode == 0 and all(name in r.stdout for name in COMMANDS)
    assert r.stdout.startswith("usage: causewatch")


def test_unknown_command_exits_2():
    r = run_cli("frobnicate", timeout=60)
    assert r.returncode == 2 and "invalid choice" in r.stderr


@pytest.mark.parametrize("argv, level, rest", [
    (["-v", "daemon", "--db", "x"], 1, ["daemon", "--db", "x"]),
    (["daemon", "--db", "x", "-vv"], 2, ["daemon", "--db", "x"]),
    (["daemon", "-q"], -1, ["daemon"]),
    (["agent", "-v", "--", "./solver", "-v", "-q"], 1, ["agent", "--", "./solver", "-v", "-q"]),
])
def test_verbosity_anywhere_before_a_launched_command(argv, level, rest):
    assert split_verbosity(argv) == (level, rest)


def test_verbose_after_the_verb_reaches_the_command(tmp_path, capsys):
    # a flag after the verb used to be "unrecognized arguments"
    assert main(["phases", str(tmp_path / "none.txt"), "-v"]) == 2
    assert "none.txt" in capsys.readouterr().err

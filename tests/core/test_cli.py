"""Every sub-command answers --help with examples; unknown commands and bad flags exit 2."""

import pytest
from support import run_cli

from causewatch.cli import _command_modules, build_parser

COMMANDS = [name for name, _ in _command_modules()]


def test_the_designed_commands_exist():
    assert {"daemon", "keys", "demo"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_examples(name, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([name, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "examples:" in out and f"causewatch {name}" in out


def test_unknown_command_exits_2():
    r = run_cli("frobnicate", timeout=60)
    assert r.returncode == 2 and "invalid choice" in r.stderr

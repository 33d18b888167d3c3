"""The README walks a new operator from `make demo` to their own program instrumented and ranked: its
two set-up commands come first, every `causewatch` command it shows parses with today's flags, its
instrument example runs against the real API, and a probe kit is built before it is registered."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from support import ROOT

from causewatch.cli import build_parser

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", README, re.S | re.M)


def commands() -> list[list[str]]:
    """Every `causewatch …` command of the README's shell blocks, split at `;`."""
    found = []
    for lang, text in BLOCKS:
        if lang == "sh":
            for line in text.splitlines():
                for part in line.split(";"):
                    words = shlex.split(part, comments=True)
                    if words[:1] == ["causewatch"]:
                        found.append(words[1:])
    return found


def test_the_two_setup_commands_come_first_and_unchanged():
    assert BLOCKS[0][1].splitlines()[:2] == [
        "make demo   # daemon + DuckDB file + local agent + workload, end to end, then a report",
        "make test   # the test suite (real sockets on loopback, real DuckDB files, real child processes)"]


def test_every_causewatch_command_shown_parses():
    shown = commands()
    assert len(shown) > 20
    for argv in shown:
        verb = next(a for a in argv if not a.startswith("-"))
        build_parser(verb).parse_args(argv)   # a flag or verb it no longer has exits 2


def test_a_kit_is_built_before_it_is_registered_and_its_app_ranked():
    order = [" ".join(argv[:2]) for argv in commands()]
    build, register = order.index("probe build"), order.index("probe register")
    assert build < register < max(i for i, c in enumerate(order) if c.startswith("rank"))
    built = commands()[build]
    assert commands()[register][2] == built[built.index("--out") + 1]   # the folder it built


def test_the_instrument_example_runs_against_the_api(tmp_path):
    (example,) = [text for lang, text in BLOCKS if lang == "python"]
    assert "from causewatch.agent.instrument import" in example
    (tmp_path / "solver.py").write_text(example)
    # no agent and no daemon: the records are spooled, and the program says so once
    out = subprocess.run([sys.executable, "solver.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"CAUSEWATCH_SPOOL": str(tmp_path / "spool"), "CAUSEWATCH_DAEMON": "tcp://127.0.0.1:9",
                              "CAUSEWATCH_IPC": f"ipc://{tmp_path}/none.sock", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "400 records wait" in out.stderr

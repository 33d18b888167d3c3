"""The part rules of docs/architecture.md (import-linter contracts in pyproject.toml) hold on the
checkout, as a plain `lint-imports` there sees it; and a crossed wall breaks a contract."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

from support import PACKAGE, ROOT, product_files

LINT = Path(sys.executable).with_name("lint-imports")


def lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_the_part_rules_hold_in_the_checkout():
    out = lint(ROOT)
    assert out.returncode == 0 and "0 broken" in out.stdout, out.stdout + out.stderr
    analyzed = int(re.search(r"Analyzed (\d+) files", out.stdout).group(1))
    assert analyzed == len(list(product_files()))   # every module of every part, not the core only


def test_a_crossed_wall_breaks_a_contract(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "causewatch", ignore=shutil.ignore_patterns("__pycache__"))
    runner = tmp_path / "causewatch" / "agent" / "runner.py"
    runner.write_text(runner.read_text() + "\n\ndef _probe():\n    from causewatch.probe.run import handle_run_probe\n"
                      "    return handle_run_probe\n")
    out = lint(tmp_path)
    assert out.returncode != 0 and "the agent never imports the probe, the daemon or the analytics BROKEN" \
        in out.stdout, out.stdout

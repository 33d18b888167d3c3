"""The part rules of docs/architecture.md (import-linter contracts in pyproject.toml) hold on the
checkout's own files, copied in the installed layout; and a crossed wall breaks a contract."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

from support import ROOT, package_folders

LINT = Path(sys.executable).with_name("lint-imports")


def installed_layout(dest: Path) -> int:
    """Copy the checkout's modules under dest as a wheel lays them out (causewatch/agent/…), since
    grimp walks the folder it finds `causewatch` in, which in the checkout holds only the core; return
    how many."""
    copied = 0
    for package, folder in package_folders().items():
        target = dest.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for path in folder.glob("*.py"):
            shutil.copyfile(path, target / path.name)
            copied += 1
    return copied


def lint(layout: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=layout,
                          capture_output=True, text=True, timeout=120)


def test_the_part_rules_hold(tmp_path):
    copied = installed_layout(tmp_path)
    out = lint(tmp_path)
    assert out.returncode == 0 and "0 broken" in out.stdout, out.stdout + out.stderr
    assert re.search(r"Analyzed (\d+) files", out.stdout).group(1) == str(copied)   # every module, not the core only


def test_a_crossed_wall_breaks_a_contract(tmp_path):
    installed_layout(tmp_path)
    runner = tmp_path / "causewatch" / "agent" / "runner.py"
    runner.write_text(runner.read_text() + "\n\ndef _probe():\n    from causewatch.probe.run import handle_run_probe\n"
                      "    return handle_run_probe\n")
    out = lint(tmp_path)
    assert out.returncode != 0 and "the agent never imports the probe, the daemon or the analytics BROKEN" \
        in out.stdout, out.stdout

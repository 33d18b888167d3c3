"""ruff (configured in pyproject.toml) finds nothing in the product, the tests or the benchmarks, and
it does see a planted fault."""

import subprocess
import sys

from support import ROOT

CHECKED = ("causewatch", "tests", "bench")


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_ruff_finds_nothing():
    out = ruff(*CHECKED)
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_reports_an_unused_import_and_an_unused_noqa(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import os\n\nx = 1  # noqa: E731\n")
    out = ruff("--config", str(ROOT / "pyproject.toml"), str(planted))
    assert out.returncode == 1 and "F401" in out.stdout and "RUF100" in out.stdout, out.stdout + out.stderr

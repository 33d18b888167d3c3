"""A plain (non-editable) install: every part imports from it, from any working directory, and the
part rules of docs/architecture.md hold on it (import-linter contracts in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("install") / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return target


def test_wheel_install_imports_every_part(site, tmp_path):
    code = ("import causewatch, causewatch.agent.sender, causewatch.daemon.server, causewatch.probe, "
            "causewatch.analytics.causal.pc; print(causewatch.__file__, causewatch.agent.sender.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                          f"sys.path += {[p for p in sys.path if 'site-packages' in p]!r}; {code}"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert all(p.startswith(str(site)) for p in out.stdout.split())
    assert (site / "causewatch" / "analytics" / "causal").is_dir()
    assert not (site / "causewatch" / "agent").is_symlink()   # the parts are real folders once installed


def test_a_folder_named_causewatch_in_the_working_directory_does_not_shadow_the_package(tmp_path):
    (tmp_path / "causewatch").mkdir()   # e.g. running from the parent of a clone named causewatch
    out = subprocess.run([sys.executable, "-m", "causewatch.cli", "--version"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("causewatch "), out.stderr


def _lint(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=site,
                          capture_output=True, text=True, timeout=120)


def test_the_part_rules_hold(site):
    out = _lint(site)
    assert out.returncode == 0 and "0 broken" in out.stdout, out.stdout + out.stderr


def test_a_crossed_wall_breaks_a_contract(site, tmp_path):
    broken = tmp_path / "site"
    shutil.copytree(site, broken, symlinks=False)
    runner = broken / "causewatch" / "agent" / "runner.py"
    runner.write_text(runner.read_text() + "\n\ndef _probe():\n    from causewatch.probe.run import handle_run_probe\n"
                      "    return handle_run_probe\n")
    out = _lint(broken)
    assert out.returncode != 0 and "the agent never imports the probe, the daemon or the analytics BROKEN" \
        in out.stdout, out.stdout

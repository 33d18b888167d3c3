"""`make test` itself: it installs the Debian packages of the commands its tests look for (as root, and
only what is missing), runs the serial part even when the parallel part failed and then fails with the
first failing part's status, and ends with one line per module of skips saying what is missing and how
to get it. The installs go to a stand-in apt-get on a PATH of stand-in commands."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support import ROOT

SCRIPT = ROOT / ".ci/install-test-packages"
BASH = shutil.which("bash")
COMMANDS = [line.split()[0] for line in (ROOT / ".ci/test-packages").read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def fake_path(folder: Path, commands) -> Path:
    """A PATH folder holding an executable of each name, and an apt-get that logs its arguments."""
    folder.mkdir()
    for name in commands:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    (folder / "apt-get").write_text(f'#!{BASH}\necho "$*" >> {folder}/apt-get.log\n')
    (folder / "apt-get").chmod(0o755)
    return folder


def install(folder: Path, *args: str, user: list[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*user, BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": str(folder)})


def apt_calls(folder: Path) -> list[str]:
    log = folder / "apt-get.log"
    return log.read_text().splitlines() if log.exists() else []


def test_every_command_present_installs_nothing_and_says_nothing(tmp_path):
    bin_ = fake_path(tmp_path / "bin", COMMANDS)
    out = install(bin_)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")
    assert apt_calls(bin_) == []   # not even an update


def test_a_dry_run_names_the_packages_of_the_missing_commands_only(tmp_path):
    bin_ = fake_path(tmp_path / "bin", [c for c in COMMANDS if c not in ("dot", "amtool")])
    out = install(bin_, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ("install-test-packages: would install prometheus-alertmanager graphviz "
                          "(for amtool dot)\n")
    assert apt_calls(bin_) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="root privileges missing — installing is for root only")
def test_root_installs_each_missing_package_once_after_one_update(tmp_path):
    bin_ = fake_path(tmp_path / "bin", [c for c in COMMANDS if c not in ("dot", "srun", "sinfo")])
    out = install(bin_)
    assert out.returncode == 0, out.stderr
    assert "installing slurmctld slurmd slurm-client munge graphviz (for srun sinfo dot)" in out.stdout
    assert apt_calls(bin_) == ["update -qq",
                               "install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge graphviz"]


def test_not_root_installs_nothing_and_says_so():
    user = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv missing — `apt-get install util-linux`")
        user = [shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups"]
    with tempfile.TemporaryDirectory() as tmp:   # readable by that user, unlike pytest's tmp_path
        os.chmod(tmp, 0o755)
        shutil.copytree(SCRIPT.parent, Path(tmp, "ci"))
        bin_ = fake_path(Path(tmp, "bin"), [c for c in COMMANDS if c != "dot"])
        out = subprocess.run([*user, BASH, f"{tmp}/ci/{SCRIPT.name}"], capture_output=True, text=True,
                             timeout=60, env={"PATH": str(bin_)})
        assert out.returncode == 0, out.stderr
        assert out.stdout == ("install-test-packages: not root, so not installing graphviz (for dot); "
                              "the tests that need them will skip\n")
        assert apt_calls(bin_) == []


PARTS = {"test_parallel.py": "def test_parallel():\n    assert {parallel}\n",
         "test_serial.py": "import pathlib, pytest\n\n\n@pytest.mark.serial\ndef test_serial():\n"
                           "    pathlib.Path(__file__).with_name('serial-ran').touch()\n    assert {serial}\n",
         "pytest.ini": "[pytest]\nmarkers = serial: alone\n"}


@pytest.mark.slow   # a pytest session with two workers and one without, under make
@pytest.mark.parametrize(("parallel", "serial", "status"), [(False, True, 1), (True, False, 1), (True, True, 0)])
def test_the_serial_part_runs_whatever_the_parallel_part_did(tmp_path, parallel, serial, status):
    for name, text in PARTS.items():
        (tmp_path / name).write_text(text.format(parallel=parallel, serial=serial))
    venv = Path(sys.executable).parents[1]
    # -o: never rebuild the venv this test runs in, whatever the checkout's pyproject.toml says
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "-o", f"{venv}/.installed", "test", f"VENV={venv}",
                          f"TESTS={tmp_path}"], capture_output=True, text=True, timeout=300)
    assert (tmp_path / "serial-ran").exists(), out.stdout + out.stderr
    assert (out.returncode == 0) == (status == 0), out.stdout + out.stderr
    assert status == 0 or f"Error {status}" in out.stderr


@pytest.mark.slow   # a pytest session with two workers
def test_skips_are_summed_up_by_module_with_what_is_missing_and_how_to_get_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadfile", "tests/core/test_units.py", "tests/core/test_deploy.py"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PATH": str(tmp_path)})   # no promtool, amtool, systemd-analyze
    summary = out.stdout[out.stdout.index("skipped: what is missing and how to get it"):].splitlines()[1:3]
    counted = [re.sub(r" \(\d+ tests\)", " (N tests)", line) for line in summary]
    assert counted == [
        "tests/core/test_deploy.py (N tests): promtool, amtool missing — `apt-get install prometheus "
        "prometheus-alertmanager` (or run `make test` as root)",
        "tests/core/test_units.py (N tests): systemd-analyze missing — `apt-get install systemd` "
        "(or run `make test` as root)"], out.stdout

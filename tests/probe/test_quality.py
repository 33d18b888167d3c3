"""A kit's quality: the machine's quietness measured around the reference runs (a real CPU hog counts,
the build's own children do not), a noisy reference refused with exit 2, a quiet one recorded."""

import json
import os
import subprocess
import sys
import time

import pytest
from support import run_cli

from causewatch.errors import InputError
from causewatch.probe import quality
from causewatch.probe.kit import FORMAT, check_manifest
from causewatch.probe.quality import format_quality

# Run alone, after the parallel part of `make test`:
# a build must find the machine quiet.
pytestmark = pytest.mark.serial

HOG = [sys.executable, "-c", "while True: pass"]
BURN = [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass"]
SMALL_BUILD = ["probe", "build", "mw", "--workload", "masterworker", "--tasks", "6", "--scale", "0.2",
               "--reference-runs", "2", "--repeats", "1", "--warmup", "0", "--json"]


class Hogs:
    """`n` child processes spinning on the CPU while the block runs."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        self.procs = [subprocess.Popen(HOG) for _ in range(self.n)]
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def test_a_cpu_hog_counts_as_other_processes_and_our_own_children_do_not():
    cores = os.cpu_count()
    with Hogs(cores):
        time.sleep(0.2)
        busy = quality.idle_window(1.0)
    assert busy["other_cpu"] >= 0.5 and busy["seconds"] >= 1.0
    meter = quality.CpuMeter()
    before = quality._own_cpu()
    subprocess.run(BURN, check=True)          # reaped: its 0.5 CPU seconds are the build's own
    assert quality._own_cpu() - before >= 0.45
    mine = meter.read()
    # the child's CPU is not counted as others': at most what the machine had besides it
    assert mine["other_cpu"] <= 1 - 0.45 / (cores * mine["seconds"]) + 0.05


def test_noise_names_each_limit_it_crosses():
    assert quality.noise(0.02, 0.05, 0.1, 0.25) == []
    (why,) = quality.noise(0.18, 0.05, 0.1, 0.25)
    assert "spread by 18.0 % (relative sd; limit 10 %)" in why
    assert len(quality.noise(0.18, 0.6, 0.1, 0.25)) == 2
    (why,) = quality.noise(None, 0.6, 0.1, 0.25, "before")      # not run yet: only the load
    assert why == "other processes used 60 % of the machine's CPU before (limit 25 %)"


def test_a_build_beside_a_cpu_hog_is_retried_then_refused(tmp_path):
    with Hogs(os.cpu_count()):
        done = run_cli(*SMALL_BUILD, "--retries", "1", "--out", str(tmp_path / "kit"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "too noisy to trust (2 attempts)" in done.stderr and "other processes used" in done.stderr
    assert not (tmp_path / "kit" / "manifest.json").exists()


def test_a_reference_whose_runs_spread_too_much_is_refused(tmp_path):
    # no two runs of a real workload take the same time: a zero limit refuses whatever the load
    done = run_cli(*SMALL_BUILD, "--retries", "0", "--max-spread", "0", "--max-other-cpu", "1",
                   "--out", str(tmp_path / "kit"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "too noisy to trust (1 attempt): the reference runs spread by" in done.stderr
    assert "limit 0 %" in done.stderr and "other processes" not in done.stderr


def test_a_quiet_build_is_accepted_with_its_quality_recorded(tmp_path):
    background = quality.idle_window(1.0)["other_cpu"]
    if background > quality.MAX_OTHER_CPU / 2:
        pytest.skip(f"other processes use {100 * background:.0f} % of this machine's CPU: it is not quiet")
    # a 2-run reference of 8 small tasks strays more than a real one: the spread limit is opened
    done = run_cli(*SMALL_BUILD, "--retries", "2", "--max-spread", "0.5", "--out", str(tmp_path / "kit"))
    assert done.returncode == 0, done.stderr
    q = json.loads(done.stdout)["quality"]
    assert q["other_cpu"] <= quality.MAX_OTHER_CPU and q["retries"] <= 2 and len(q["retried_because"]) == q["retries"]


def test_quality_in_a_manifest_is_checked_and_formatted():
    manifest = {"format": FORMAT, "app": "a", "kit": "k", "worker": {"callable": "m:f"}, "phases": [],
                "reference_seconds": 1.0, "reference_runs": 3}
    check_manifest(manifest)                                            # an older kit: no quality
    assert format_quality(manifest).startswith("quality not recorded")
    q = {"spread": 0.031, "other_cpu": 0.12, "other_cpu_before": 0.08, "cpu_bound_phases": 2, "phases": 5,
         "retries": 1}
    check_manifest({**manifest, "quality": q})
    assert format_quality({**manifest, "quality": q}) == (
        "reference spread 3.1 % over 3 runs, others used 12 % CPU (idle before: 8 %), 2/5 phases CPU-bound, 1 retry")
    with pytest.raises(InputError, match="quality needs spread, other_cpu"):
        check_manifest({**manifest, "quality": {"spread": 0.1}})

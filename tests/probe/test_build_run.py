"""Build a kit of the bundled workload on this node, run it here, check the prediction and the wire body."""

import io
import json
import subprocess
import sys

import msgpack
import numpy as np
import pytest
from support import run_cli

from causewatch import wire
from causewatch.analytics.phases import read_labels
from causewatch.cli import main
from causewatch.errors import InputError
from causewatch.probe.build import covering, cpu_bound
from causewatch.probe.quality import format_quality
from causewatch.probe.run import handle_run_probe, probe_result_body, run_kit
from causewatch.probe.workloads import masterworker as mw
from causewatch.probe.workloads.nodes import cpu_quota, quota_available

# Run alone, after the parallel part of `make test`:
# its predictions are checked against full runs timed on this machine.
pytestmark = pytest.mark.serial

TASKS, SCALE = 16, 1.0


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit") / "mw"
    done = run_cli("probe", "build", "mw", "--workload", "masterworker", "--tasks", str(TASKS), "--scale", str(SCALE),
                   "--reference-runs", "3", "--repeats", "3", "--kit", "mw-test", "--out", str(out),
                   # a 16-task run on a machine the rest of the suite shares strays more than a long one, and
                   # the suite's other processes load it: these tests are about the kit, not the machine
                   # (tests/probe/test_quality.py refuses and accepts builds on their noise)
                   "--min-spread", "0.1", "--max-spread", "1", "--max-other-cpu", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert "reference runs" not in done.stderr   # no progress bars when stderr is no terminal
    return out, json.loads(done.stdout)


def test_manifest_describes_phases_and_reference(kit):
    out, manifest = kit
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert manifest["app"] == "mw" and manifest["kit"] == "mw-test" and manifest["tasks"] == TASKS
    assert manifest["reference"]["cores"] >= 1 and manifest["reference"]["cpu_model"]
    assert sum(p["weight"] for p in manifest["phases"]) == pytest.approx(1.0)
    assert sum(p["tasks"] for p in manifest["phases"]) <= TASKS and 0.95 <= manifest["covered_weight"] <= 1.0
    assert manifest["reference_lo"] <= manifest["reference_seconds"] <= manifest["reference_hi"]
    # 16 tasks are too few to time in parts: one window, after the whole run
    assert manifest["reference_runs"] == 3 and manifest["reference_windows"] == 1 and manifest["min_spread"] == 0.1
    q = manifest["quality"]
    assert q["spread"] == pytest.approx(manifest["reference_rel_sd"]) and q["max_spread"] == 1
    assert 0 <= q["other_cpu"] <= 1 and 0 <= q["other_cpu_before"] <= 1 and 0 <= q["steal"] <= 1
    assert q["phases"] == len(manifest["phases"]) and q["retries"] == 0 and q["retried_because"] == []
    assert q["cpu_bound_phases"] == sum(p["cpu_bound"] for p in manifest["phases"])
    assert f"{q['cpu_bound_phases']}/{q['phases']} phases CPU-bound, no retry" in format_quality(manifest)
    tasks = mw.make_tasks(TASKS, 0, SCALE)
    labels, _ = read_labels(out / "tasks.labels")
    for p in manifest["phases"]:
        assert json.loads((out / p["input_file"]).read_text()) == tasks[p["representative"]] == p["input"]
        assert 0 <= p["ref_se"] < p["ref_seconds"] and 0 <= p["ref_cpu_se"] < p["ref_cpu_seconds"]
        # a phase holds tasks of one type: the profile vectors separate the kinds of work
        assert len({tasks[i]["type"] for i in range(TASKS) if labels[i] == p["phase"]}) == 1


def test_cpu_bound_phases_and_the_reference_stretch(kit):
    _, manifest = kit
    assert all(isinstance(p["cpu_bound"], bool) for p in manifest["phases"])
    if any(p["cpu_bound"] for p in manifest["phases"]):
        assert 0.9 <= manifest["reference_stretch"] <= 1.1 and manifest["reference_stretch_se2"] >= 0
    else:
        assert "reference_stretch" not in manifest


def test_a_phase_is_cpu_bound_when_its_blocks_keep_one_thread_busy():
    def block(wall, cpu):
        return {"span_seconds": wall, "span_cpu_seconds": cpu}
    assert cpu_bound([block(0.20, 0.19), block(0.21, 0.20)])
    assert not cpu_bound([block(0.20, 0.02)])            # sleeps or waits on I/O
    assert not cpu_bound([block(0.20, 0.39)])            # two busy threads
    assert not cpu_bound([block(0.20, 0.0)])


def test_coverage_keeps_the_largest_phases_in_phase_order():
    weights = np.array([0.207, 0.231, 0.206, 0.077, 0.278, 0.001])
    assert covering(weights, 0.99) == [0, 1, 2, 3, 4]
    assert covering(weights, 1.0) == [0, 1, 2, 3, 4, 5]
    assert covering(weights, 0.5) == [1, 4]
    assert covering(weights * 7, 0.5) == [1, 4]          # weights need not sum to 1


# Five, not three: 14 trials here (each a new kit, five kit runs between ten full runs, beside a
# niced background load) put the median full run at an rms 0.45 of the interval's half-width from
# its centre with five and 0.51 with three (outside: 1 and 2 of 14).
KIT_RUNS = 5


@pytest.fixture(scope="module")
def same_node(kit):
    """The kit run KIT_RUNS times on the node it was built on, each between two full runs of the workload
    there, as the application runs it (workers spawned from pytest would import pytest first and run tasks
    20 % slower): the run whose prediction is the median, and the 2 * KIT_RUNS full runs.

    Interleaved, because a shared VM's speed drifts by 20-30 % over seconds (a fixed loop's CPU time
    each second of 20 quiet ones here: 21.7-30.0 ms): five full runs taken before one probe compared
    the probe with another moment, and failed CI twice."""
    _, manifest = kit
    command = [sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--tasks", str(TASKS), "--scale",
               str(SCALE), "--workers", str(manifest["workers"]), "--json"]

    def full_run() -> dict:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        return json.loads(done.stdout)

    kits, full = [], []
    for _ in range(KIT_RUNS):
        full.append(full_run())
        kits.append(run_kit(manifest))
        full.append(full_run())
    kits.sort(key=lambda r: r["predicted_cpu_seconds"])
    return kits[KIT_RUNS // 2], full


def test_kit_predicts_its_own_node(same_node):
    result, _ = same_node
    assert result["lo"] <= result["predicted_seconds"] <= result["hi"]
    assert result["cpu_lo"] <= result["predicted_cpu_seconds"] <= result["cpu_hi"]
    assert 0.5 < result["cpu_ratio"] < 2.0


def test_full_runs_fall_inside_the_reported_interval(same_node):
    """The interval is a 95 % one for one more run, so the median of 2 * KIT_RUNS runs falls inside it
    all but always when it is centred right; an interval shifted by its own width leaves it outside. Five
    full runs before one probe, most inside, failed 2 of 6 trials on a quiet machine here; interleaved
    with three kit runs, 1 of 28."""
    result, full = same_node
    # CPU task-seconds: the wall time of a run on 2 cores shared with other test processes depends on them
    cpu = [run["task_cpu_seconds"] for run in full]
    assert result["cpu_lo"] <= float(np.median(cpu)) <= result["cpu_hi"], \
        f"{cpu} against [{result['cpu_lo']:.3f}, {result['cpu_hi']:.3f}]"


def test_cpu_bound_phases_scale_their_cpu_time_by_the_stretch(same_node):
    result, _ = same_node
    for row in result["phases"]:
        if row["stretched"]:
            factor = result["stretch"] / result["reference_stretch"]
            assert row["ratio"] == pytest.approx(row["cpu_ratio"] * factor)
        else:
            assert row["ratio"] == pytest.approx(row["wall_ratio"])


def _all_cpu_bound(manifest: dict) -> dict:
    """The kit with every phase marked CPU-bound: whether the build saw them so depends on how idle the
    machine was then, and these tests are about the run."""
    return {**manifest, "reference_stretch": manifest.get("reference_stretch", 1.0), "reference_stretch_se2": 0.0,
            "phases": [{**p, "cpu_bound": True} for p in manifest["phases"]]}


@pytest.mark.skipif(not quota_available(), reason="cgroup CPU quotas are not writable here")
def test_a_real_cpu_quota_stretches_the_prediction(kit):
    """Under a 50 % CFS quota the probe's blocks take twice their CPU time: the stretch finds 2, and the
    prediction grows by it (CPU time itself may grow too: a throttled task comes back to cold caches)."""
    manifest = _all_cpu_bound(kit[1])
    free = run_kit(manifest, repeats=10)
    with cpu_quota(0.5):
        limited = run_kit(manifest, repeats=10)
    grown = limited["stretch"] / free["stretch"]
    # The quota alone sets the stretch at 2 (1.99-2.01 here, quiet or beside two busy loops); a neighbour
    # on the cores during the free run raises only the free stretch: a CI run saw 1.63x, 2 over ~1.22.
    assert 1.8 <= limited["stretch"] and grown <= 2.3
    # The prediction is CPU time scaled by the stretch: it grows by the stretch, less any fall of the
    # measured CPU time between the two runs (a CI run saw the prediction grow 1.73x with the stretch
    # at 2.00); without the stretch it would grow by that CPU change alone (about 1).
    cpu_change = limited["cpu_ratio"] / free["cpu_ratio"]
    assert limited["ratio"] / free["ratio"] >= 0.9 * grown * min(cpu_change, 1.0)
    assert limited["lo"] <= limited["predicted_seconds"] <= limited["hi"]


def test_a_kit_without_cpu_bound_phases_compares_wall_times(kit):
    manifest = {**kit[1], "phases": [{**p, "cpu_bound": False} for p in kit[1]["phases"]]}
    result = run_kit(manifest, repeats=2)
    assert result["stretch"] is None
    assert all(not r["stretched"] and r["ratio"] == r["wall_ratio"] for r in result["phases"])


def test_run_probe_frame_gives_a_valid_probe_result(kit):
    out, manifest = kit
    body = handle_run_probe({"app": "mw", "kit": "mw-test", "manifest": manifest})
    frame = wire.decode(wire.encode("probe_result", "n1", "b1", 1, body))
    assert frame.body["app"] == "mw" and frame.body["kit"] == "mw-test"
    assert frame.body["lo"] <= frame.body["predicted_seconds"] <= frame.body["hi"]
    assert len(frame.body["phases"]) == len(manifest["phases"])
    # the node's load while the probe ran travels with it (no idle wait asked for here)
    assert 0 <= frame.body["extra"]["other_cpu"] <= 1 and frame.body["extra"]["max_other_cpu"] == 0.25
    assert frame.body["extra"]["busy"] == (frame.body["extra"]["other_cpu"] > 0.25)
    by_path = handle_run_probe({"app": "mw", "kit": str(out)})
    assert set(by_path) == set(body)
    with pytest.raises(InputError, match="not 'other'"):
        handle_run_probe({"app": "other", "kit": "mw-test", "manifest": manifest})
    # the manifest travels inside run_probe frames: it must fit the wire's checks
    run_probe = wire.decode(wire.encode("run_probe", "daemon", "b", 1, {"app": "mw", "kit": "k", "manifest": manifest}),
                            types=wire.DAEMON_TYPES)
    assert run_probe.body["manifest"]["phases"] == manifest["phases"]
    assert msgpack.unpackb(msgpack.packb(probe_result_body(run_kit(manifest, 0, 1)))) is not None


def test_probe_run_command_prints_table_and_json(kit):
    out, _ = kit
    table = run_cli("probe", "run", str(out), "--repeats", "1", "--warmup", "0")
    assert table.returncode == 0, table.stderr
    assert table.stderr == ""   # no progress bar when stderr is no terminal
    assert "P = " in table.stdout and "predicted" in table.stdout
    as_json = run_cli("probe", "run", str(out), "--repeats", "1", "--json", "--idle-wait", "1")
    assert json.loads(as_json.stdout)["kit"] == "mw-test"
    load = json.loads(as_json.stdout)["load"]
    assert load["idle_waited"] >= 0.9 and 0 <= load["other_cpu_before"] <= 1 and 0 <= load["other_cpu"] <= 1
    missing = run_cli("probe", "run", str(out / "nope"))
    assert missing.returncode == 2 and "cannot read the kit manifest" in missing.stderr


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_probe_run_draws_its_progress_on_a_terminal(kit, monkeypatch, capsys):
    out, manifest = kit
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["probe", "run", str(out), "--repeats", "1", "--warmup", "0", "--json"]) == 0
    n = len(manifest["phases"])
    assert "probe: 100%" in sys.stderr.getvalue() and f"{n}/{n}" in sys.stderr.getvalue()


def test_probe_build_refuses_a_coverage_outside_0_1(tmp_path):
    done = run_cli("probe", "build", "mw", "--workload", "masterworker", "--tasks", "4", "--coverage", "0",
                   "--out", str(tmp_path / "kit"))
    assert done.returncode == 2 and "coverage must lie in (0, 1]" in done.stderr

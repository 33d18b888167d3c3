"""Tests of probe kit pieces: workers, timing, manifests, and the BBV sources (valgrind for real)."""

import json
import os
import shutil
import threading
import time

import numpy as np
import pytest

from causewatch.agent.ipsampler import IPSampler
from causewatch.errors import InputError
from causewatch.probe import bbvsource
from causewatch.probe.kit import Worker, check_manifest, load_manifest, measure, measure_all, wait_until_quiet

MW = "causewatch.probe.workloads.masterworker:run_task"
# a command worker whose two task kinds run different programs
SH = ("sh", "-c", 'case "$(cat "$0")" in *gz*) seq 1 20000 | gzip > /dev/null;; '
      '*) seq 1 20000 | sort -r > /dev/null;; esac', "{input}")


def test_worker_needs_exactly_one_form():
    with pytest.raises(InputError):
        Worker()
    with pytest.raises(InputError):
        Worker(callable=MW, command=("x", "{input}"))
    with pytest.raises(InputError, match="module:function"):
        Worker(callable="nocolon")
    with pytest.raises(InputError, match="input"):
        Worker(command=("prog",))
    w = Worker(command=SH)
    assert Worker.from_json(json.loads(json.dumps(w.to_json()))) == w


def test_command_worker_is_timed_with_child_cpu():
    wall, cpu = Worker(command=SH).timed("sort")
    assert wall > 0 and cpu > 0


def test_failing_command_worker_is_reported():
    with pytest.raises(InputError, match="exited with 3"):
        Worker(command=("sh", "-c", "exit 3", "{input}")).timed({})


# tasks of ~10 ms, not ~1: the span's slack (ten of the slowest run) must outlast a loaded machine's preemption
@pytest.mark.parametrize("worker, task", [(Worker(callable=MW), {"id": "a", "type": "dict", "size": 20000, "seed": 1}),
                                          (Worker(command=SH), "sort")])
def test_measure_reports_mean_spread_and_the_blocks_span(worker, task):
    m = measure(worker, task, warmup=1, repeats=3)
    assert m["lo"] <= m["seconds"] <= m["hi"] and m["cpu_lo"] <= m["cpu_seconds"] <= m["cpu_hi"]
    assert m["repeats"] == 3
    # the span covers the warm-up and the three timed runs, back to back
    assert 3 * m["seconds"] < m["span_seconds"] < 3 * m["seconds"] + 10 * m["hi"]
    assert 3 * m["cpu_seconds"] < m["span_cpu_seconds"] + 1e-6


def test_a_probes_first_block_spans_from_after_its_first_warm_up():
    """The first block follows idle time (start-up, the wait for quiet), when a CPU quota's budget is full."""
    nap = Worker(callable="time:sleep")
    # naps long enough that a loaded machine's overruns stay below one of them
    whole, first = (measure(nap, 0.2, warmup=2, repeats=2, first=f)["span_seconds"] for f in (False, True))
    assert 0.8 <= whole and 0.6 <= first < 0.8


def test_manifest_errors_name_the_problem(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(InputError, match="not JSON"):
        load_manifest(tmp_path)
    with pytest.raises(InputError, match="format"):
        check_manifest({"app": "x"})
    with pytest.raises(InputError, match="'phases'"):
        check_manifest({"format": "causewatch-probe-kit/1", "app": "a", "kit": "k", "worker": {},
                        "reference_seconds": 1})


def test_cprofile_source_folds_by_function():
    src = bbvsource.source_for("auto", Worker(callable=MW))
    assert src.name == "cprofile"
    vec = src.record(Worker(callable=MW), {"id": "a", "type": "dict", "size": 20000, "seed": 1})
    assert any("_dict" in k for k in vec) and all(v > 0 for v in vec.values())
    with pytest.raises(InputError):
        src.record(Worker(command=SH), "x")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind missing")
@pytest.mark.slow   # three runs under valgrind
def test_valgrind_source_gives_exact_function_vectors():
    src = bbvsource.source_for("auto", Worker(command=SH))
    assert src.name == "valgrind"
    gz, gz2, sort = (src.record(Worker(command=SH), x) for x in ("gz", "gz", "sort"))
    assert any("strcoll" in k or "strcmp" in k for k in sort)
    keys = sorted(set(gz) | set(sort) | set(gz2))
    a, a2, b = (np.array([v.get(k, 0) for k in keys], float) for v in (gz, gz2, sort))
    # exact counts: the same task repeats to within environment noise (pids, temp names); kinds differ
    assert np.abs(a / a.sum() - a2 / a2.sum()).sum() < 0.01
    assert np.abs(a / a.sum() - b / b.sum()).sum() > 0.5


def test_fold_exp_bbv_joins_threads_and_names(tmp_path):
    (tmp_path / "bb.7").write_text("T:1:10   :2:5   \nT:1:1   \n")
    (tmp_path / "bb.7.2").write_text("T:2:4   \n")
    (tmp_path / "pc.7").write_text("F:1:401000:main\nF:2:401010:\n")
    assert bbvsource.fold_exp_bbv(str(tmp_path)) == {"main": 11, "0x401010": 9}


def test_unknown_source_is_named():
    with pytest.raises(InputError, match="unknown BBV source"):
        bbvsource.source_for("pin", Worker(callable=MW))


def test_agent_sampled_source_separates_kinds_of_work():
    sampler = IPSampler(pid=os.getpid())
    status = sampler.open()
    sampler.close()
    if status != "ok":
        pytest.skip(f"perf_event_open IP sampling unavailable: {status}")
    src = bbvsource.source_for("agent", Worker(callable=MW))
    integer, stream = (src.record(Worker(callable=MW), {"id": k, "type": k, "size": n, "seed": 1})
                       for k, n in (("integer", 6000), ("stream", 4_000_000)))
    assert any("_PyEval_EvalFrameDefault" in k for k in integer)
    keys = sorted(set(integer) | set(stream))
    a, b = (np.array([v.get(k, 0) for k in keys], float) for v in (integer, stream))
    assert np.abs(a / a.sum() - b / b.sum()).sum() > 0.8


def test_measure_all_times_callables_in_a_fresh_interpreter_and_names_failures():
    ok = {"id": "a", "type": "integer", "size": 50, "seed": 1}
    results = measure_all(Worker(callable=MW), [ok, dict(ok, type="dict")], warmup=0, repeats=2)
    assert [r["repeats"] for r in results] == [2, 2] and all(r["seconds"] > 0 for r in results)
    # a worker writing to stdout cannot corrupt the results channel
    chatty = measure_all(Worker(callable="builtins:print"), ["hello"], warmup=0, repeats=1)
    assert chatty[0]["repeats"] == 1
    with pytest.raises(InputError, match="type must be one of"):
        measure_all(Worker(callable=MW), [dict(ok, type="nope")], warmup=0, repeats=1)


def test_timing_waits_until_start_up_threads_stop_spinning():
    """Like OpenBLAS's threads after numpy loads: a thread that burns CPU for 0.3 s after start-up."""
    stop = time.perf_counter() + 0.3

    def spin():
        while time.perf_counter() < stop:
            pass
    spinner = threading.Thread(target=spin)
    spinner.start()
    t0 = time.perf_counter()
    wait_until_quiet()
    waited = time.perf_counter() - t0
    spinner.join()
    assert 0.25 <= waited < 1.0
    t0 = time.perf_counter()
    wait_until_quiet()
    assert time.perf_counter() - t0 < 0.25

"""The running units on /metrics: each unit's series labelled by its records, shown while it runs and
dropped at its end, so however many short units come and go a node leaves no series behind."""

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from causewatch import wire
from causewatch.agent import cgroups
from causewatch.daemon import node_metrics
from causewatch.daemon.exporter import Exporter

_seq = iter(range(1, 10**9))


def frame(kind: str, body: dict, node: str = "n1") -> wire.Frame:
    return wire.decode(wire.encode(kind, node, "b", next(_seq), body))


def start(unit: str, **fields) -> wire.Frame:
    kind = unit.split(":")[0]
    return frame("unit", {"unit": unit, "kind": kind, "event": "start", "start": 10.0, **fields})


def end(unit: str) -> wire.Frame:
    return frame("unit", {"unit": unit, "kind": unit.split(":")[0], "event": "end", "start": 10.0, "end": 20.0})


def counters(unit: str, cpu: float, node: str = "n1") -> wire.Frame:
    return frame("samples", wire.samples_body(np.array([1.0, 2.0]), ["unit_cpu_seconds_total", "unit_memory_bytes"],
                                              np.array([[cpu / 2, 5e6], [cpu, 6e6]]), unit), node)


def families(exporter: Exporter) -> dict:
    return {f.name: f for f in text_string_to_metric_families(exporter.exposition().decode())}


def unit_samples(exporter: Exporter) -> list:
    return [s for name, f in families(exporter).items() if name.startswith("causewatch_unit") for s in f.samples]


def test_a_units_series_carry_its_records_labels_not_its_scope():
    exporter = Exporter()
    exporter.nodes.observe([start("job:42", job_id="42", user="ann", cpus=4.0, memory_bytes=2**30),
                            counters("job:42", 7.0),
                            frame("samples", wire.samples_body([1.0], ["memory_used_bytes"], [[1.0]]))])
    got = families(exporter)
    [cpu] = got["causewatch_unit_cpu_seconds"].samples
    assert got["causewatch_unit_cpu_seconds"].type == "counter"
    assert (cpu.name, cpu.labels, cpu.value) == ("causewatch_unit_cpu_seconds_total", {
        "node": "n1", "unit": "job:42", "kind": "job", "job_id": "42", "user": "ann"}, 7.0)
    assert [s.value for s in got["causewatch_unit_memory_bytes"].samples] == [6e6]
    assert [s.value for s in got["causewatch_unit_cpus"].samples] == [4.0]
    assert [s.value for s in got["causewatch_unit_memory_limit_bytes"].samples] == [2**30]
    assert [s.labels["scope"] for s in got["causewatch_memory_used_bytes"].samples] == ["node"]   # others keep scope
    # an update (the owner found later) relabels the running unit's series; the end drops them all
    exporter.nodes.observe([frame("unit", {"unit": "job:42", "kind": "job", "event": "update", "start": 10.0,
                                           "user": "bob"})])
    assert {s.labels["user"] for s in unit_samples(exporter)} == {"bob"}
    exporter.nodes.observe([end("job:42")])
    assert unit_samples(exporter) == []
    assert [s.value for s in families(exporter)["causewatch_memory_used_bytes"].samples] == [1.0]


def test_two_hundred_short_units_in_a_row_leave_no_series_behind():
    exporter = Exporter()
    for i in range(200):
        exporter.nodes.observe([start(f"job:{i}", job_id=str(i), user="ann", cpus=1.0), counters(f"job:{i}", i)])
        assert len(unit_samples(exporter)) == 4   # cpu, memory, start time, cpus: this unit's alone
        exporter.nodes.observe([end(f"job:{i}")])
    assert unit_samples(exporter) == []
    assert not exporter.nodes._rows and not exporter.nodes._unit_rows and not exporter.nodes.units.running


def test_samples_of_an_ended_unit_that_come_late_are_not_shown_again():
    exporter = Exporter()
    exporter.nodes.observe([start("container:abc"), counters("container:abc", 1.0), end("container:abc"),
                            counters("container:abc", 2.0)])   # one batch: the end wins over what follows it
    assert unit_samples(exporter) == []
    exporter.nodes.observe([counters("container:abc", 3.0)])
    assert unit_samples(exporter) == []
    exporter.nodes.observe([start("container:abc"), counters("container:abc", 4.0)])   # started again: shown
    assert {s.value for s in unit_samples(exporter) if s.name == "causewatch_unit_cpu_seconds_total"} == {4.0}


def test_units_a_restarted_daemon_finds_running_keep_their_labels():
    exporter = Exporter()
    exporter.nodes.units.seed([{"node": "n1", "unit": "job:9", "kind": "job", "job_id": "9", "user": "ann",
                                "start": 5.0, "cpus": None, "memory_bytes": None, "gpus": None}])
    exporter.nodes.observe([counters("job:9", 3.0)])
    assert {s.labels["user"] for s in unit_samples(exporter)} == {"ann"}
    exporter.nodes.observe([counters("service:x.service", 1.0)])   # never announced: its name and kind
    labels = [s.labels for s in unit_samples(exporter) if s.labels["unit"] == "service:x.service"]
    assert labels and all(lab["kind"] == "service" and lab["job_id"] == "" for lab in labels)


def test_every_metric_an_agent_counts_per_unit_has_help():
    names = {*cgroups.METRICS, "unit_processes"}
    assert not sorted(n for n in names if n not in node_metrics.HELP)

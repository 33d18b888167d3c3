"""The exporter: node metrics from the agents' newest samples (labels, not names, carry CPU and mode;
counters end in _total), when each node was last seen, and job snapshots swapped whole; the output
parses with client_python's parser and, where promtool is installed, passes `promtool check metrics`."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from causewatch import wire
from causewatch.agent.perf import DERIVED, EVENTS
from causewatch.agent.system import NodeCollector, ProcessCollector
from causewatch.daemon import node_metrics
from causewatch.daemon.exporter import Exporter, gauge_family, node_series


def _samples(node, scope, names, rows):
    """A samples frame as an agent sends it (NaN is sent as an explicit null)."""
    body = wire.samples_body(np.arange(len(rows), dtype=float), names, np.array(rows, float), scope)
    return wire.decode(wire.encode("samples", node, "b", 1, body))


def test_node_series_names_after_node_exporter():
    assert node_series("cpu_user_seconds_total.cpu3") == ("causewatch_cpu_seconds_total", {"cpu": "3", "mode": "user"})
    assert node_series("cpu_utilization_ratio.cpu0") == ("causewatch_cpu_utilization_ratio", {"cpu": "0"})
    assert node_series("memory_used_bytes") == ("causewatch_memory_used_bytes", {})
    assert node_series("cache-misses") == ("causewatch_cache_misses", {})
    assert node_series("cache_misses") == ("causewatch_cache_misses_total", {})   # perf's: cumulative
    assert node_series("context_switches.cpu1") == ("causewatch_context_switches_total", {"cpu": "1"})


def test_metrics_read_as_prometheus_users_read_them():
    """No all-CPU series beside the per-CPU ones (a sum by node counted each CPU twice), perf's
    cumulative counts are counters with _total, and each agent metric has HELP that says what it is."""
    exporter = Exporter()
    names = ["cpu_user_seconds_total", "cpu_user_seconds_total.cpu0", "cpu_user_seconds_total.cpu1",
             "cpu_idle_seconds_total", "cpu_idle_seconds_total.cpu0", "cpu_idle_seconds_total.cpu1",
             "task_clock_seconds", "context_switches", "page_faults", "cpu_migrations", "memory_available_bytes",
             "my_own_gauge"]
    exporter.nodes.observe([_samples("n1", "node", names, [[5, 2, 3, 15, 7, 8, 1.5, 100, 20, 3, 1e9, 1]])])
    text = exporter.exposition().decode()
    assert 'cpu=""' not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    busy = sum(s.value for s in families["causewatch_cpu_seconds"].samples if s.labels["mode"] != "idle")
    assert busy == 5.0   # 2 + 3, not 10
    for name in ("task_clock_seconds", "context_switches", "page_faults", "cpu_migrations"):
        family = families[f"causewatch_{name}"]
        assert family.type == "counter" and [s.name for s in family.samples] == [f"causewatch_{name}_total"]
    helps = {name: f.documentation for name, f in families.items() if name.startswith("causewatch_")}
    assert helps["causewatch_memory_available_bytes"].startswith("Memory available to new programs")
    assert helps["causewatch_cpu_seconds"].startswith("Seconds the CPUs spent in each mode")
    assert helps["causewatch_my_own_gauge"] == "my_own_gauge as an agent sent it (not one of causewatch's own metrics)"
    assert not [n for n, h in helps.items() if "as an agent sent it" in h and n != "causewatch_my_own_gauge"]


def test_every_metric_a_real_agent_sends_has_help():
    """The names a SystemCollector and a ProcessCollector of this machine send, and every perf event."""
    system = NodeCollector(per_cpu=True)
    system.collect()
    process = ProcessCollector(os.getpid())
    process.collect()
    names = {*system.collect(), *process.collect(), *EVENTS, *DERIVED}
    exported = {node_series(n)[0].removeprefix("causewatch_") for n in names}
    assert len(exported) >= 40
    unknown = sorted(n for n in exported if n not in node_metrics.HELP)
    assert not unknown, f"no HELP for {unknown}"


def test_newest_values_per_node_and_scope_with_last_seen(monkeypatch):
    exporter = Exporter()
    exporter.nodes.clock = lambda: 1234.5
    exporter.nodes.observe([
        _samples("n1", "node", ["cpu_user_seconds_total.cpu0", "cpu_user_seconds_total.cpu1", "memory_used_bytes"],
                 [[1, 2, 100], [3, 4, 200]]),
        _samples("n2", "pid:7", ["process_threads", "memory_used_bytes"], [[5, float("nan")]]),
    ])
    families = {f.name: f for f in text_string_to_metric_families(exporter.exposition().decode())}
    cpu = families["causewatch_cpu_seconds"]
    assert cpu.type == "counter"
    assert {(s.labels["cpu"], s.labels["mode"], s.value) for s in cpu.samples} == {
        ("0", "user", 3.0), ("1", "user", 4.0)}
    memory = families["causewatch_memory_used_bytes"]
    assert [(s.labels["node"], s.labels["scope"], s.value) for s in memory.samples] == [("n1", "node", 200.0)]
    assert [s.value for s in families["causewatch_process_threads"].samples] == [5.0]     # the null is not shown
    seen = families["causewatch_agent_last_seen_timestamp_seconds"]
    assert {(s.labels["node"], s.value) for s in seen.samples} == {("n1", 1234.5), ("n2", 1234.5)}
    stored = families["causewatch_node_frames_stored"]
    assert {(s.labels["node"], s.value) for s in stored.samples} == {("n1", 1), ("n2", 1)}


def test_a_series_sent_under_several_name_lists_shows_its_newest_value():
    """An agent whose frames carry different name lists (a metric that comes and goes): each series
    shows the value of the newest frame that carried it, whichever list that frame had."""
    exporter = Exporter()

    def shown():
        families = text_string_to_metric_families(exporter.exposition().decode())
        return {f.name: s.value for f in families for s in f.samples if f.name in ("causewatch_load1",
                "causewatch_memory_used_bytes", "causewatch_memory_available_bytes")}
    exporter.nodes.observe([_samples("n1", "node", ["load1", "memory_used_bytes"], [[1, 2]])])
    exporter.nodes.observe([_samples("n1", "node", ["memory_used_bytes", "memory_available_bytes"], [[3, 4]])])
    assert shown() == {"causewatch_load1": 1, "causewatch_memory_used_bytes": 3, "causewatch_memory_available_bytes": 4}
    exporter.nodes.observe([_samples("n1", "node", ["load1", "memory_used_bytes"], [[5, float("nan")]]),
                            _samples("n1", "node", ["load1", "memory_used_bytes"], [[7, 6]])])   # one batch
    assert shown() == {"causewatch_load1": 7, "causewatch_memory_used_bytes": 6, "causewatch_memory_available_bytes": 4}


def test_a_jobs_snapshot_replaces_its_previous_one_whole():
    exporter = Exporter()
    exporter.publish("j", [gauge_family("causewatch_x", "h", ["a"], [({"a": "1"}, 1.0), ({"a": "2"}, 2.0)])])
    exporter.publish("j", [gauge_family("causewatch_x", "h", ["a"], [({"a": "3"}, 3.0)])])
    text = exporter.exposition().decode()
    assert 'causewatch_x{a="3"} 3.0' in text and 'a="1"' not in text and 'a="2"' not in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing")
def test_promtool_accepts_the_whole_exposition():
    exporter = Exporter()
    exporter.nodes.observe([_samples("n1", "node", ["cpu_idle_seconds_total.cpu0", "load1", "disk_read_bytes_total"],
                                     [[1, 0.5, 10]])])
    exporter.frames_stored.labels("samples").inc()
    out = subprocess.run(["promtool", "check", "metrics"], input=exporter.exposition(), capture_output=True)
    assert out.returncode == 0, out.stdout + out.stderr

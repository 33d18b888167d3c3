"""The exporter: node metrics from the agents' newest samples (labels, not names, carry CPU and mode;
counters end in _total), when each node was last seen, and job snapshots swapped whole; the output
parses with client_python's parser and, where promtool is installed, passes `promtool check metrics`."""

import shutil
import subprocess

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from causewatch import wire
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


def test_a_jobs_snapshot_replaces_its_previous_one_whole():
    exporter = Exporter()
    exporter.publish("j", [gauge_family("causewatch_x", "h", ["a"], [({"a": "1"}, 1.0), ({"a": "2"}, 2.0)])])
    exporter.publish("j", [gauge_family("causewatch_x", "h", ["a"], [({"a": "3"}, 3.0)])])
    text = exporter.exposition().decode()
    assert 'causewatch_x{a="3"} 3.0' in text and 'a="1"' not in text and 'a="2"' not in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (.ci/run installs it)")
def test_promtool_accepts_the_whole_exposition():
    exporter = Exporter()
    exporter.nodes.observe([_samples("n1", "node", ["cpu_idle_seconds_total.cpu0", "load1", "disk_read_bytes_total"],
                                     [[1, 0.5, 10]])])
    exporter.frames_stored.labels("samples").inc()
    out = subprocess.run(["promtool", "check", "metrics"], input=exporter.exposition(), capture_output=True)
    assert out.returncode == 0, out.stdout + out.stderr

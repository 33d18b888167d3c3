"""The exporter: node metrics from the agents' newest samples (labels, not names, carry CPU and mode;
counters end in _total; a series no longer sent leaves), when each node was last seen, and job
snapshots swapped whole; the output parses with client_python's parser and, where promtool is
installed, passes `promtool check metrics`."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from causewatch import wire
from causewatch.agent.perf import DERIVED, EVENTS
from causewatch.agent.system import ProcessCollector
from causewatch.daemon import node_metrics
from causewatch.daemon.exporter import Exporter, gauge_family, node_series


def _samples(node, scope, names, rows):
    """A samples frame as an agent sends it (NaN is sent as an explicit null)."""
    body = wire.samples_body(np.arange(len(rows), dtype=float), names, np.array(rows, float), scope)
    return wire.decode(wire.encode("samples", node, "b", 1, body))


def test_node_series_names_after_node_exporter():
    assert node_series("node_load1") == ("node_load1", {})
    cpu = wire.labelled("node_cpu_seconds_total", {"cpu": "3", "mode": "user"})
    assert node_series(cpu) == ("node_cpu_seconds_total", {"cpu": "3", "mode": "user"})
    assert node_series("process_threads") == ("causewatch_process_threads", {})
    assert node_series("cache-misses") == ("causewatch_cache_misses", {})
    assert node_series("cache_misses") == ("causewatch_cache_misses_total", {})   # perf's: cumulative
    assert node_series("context_switches.cpu1") == ("causewatch_context_switches_total", {"cpu": "1"})


def test_metrics_read_as_prometheus_users_read_them():
    """No all-CPU series beside the per-CPU ones (a sum by node counted each CPU twice), perf's
    cumulative counts are counters with _total, node_exporter's names keep their types, and each agent
    metric has HELP that says what it is."""
    exporter = Exporter()
    cpu = [wire.labelled("node_cpu_seconds_total", {"cpu": c, "mode": m}) for c in "01" for m in ("user", "idle")]
    names = ["context_switches", "context_switches.cpu0", "context_switches.cpu1", "task_clock_seconds",
             "page_faults", "cpu_migrations", "process_resident_memory_bytes", *cpu, "node_load1",
             "node_vmstat_pgfault", "my_own_gauge"]
    exporter.nodes.observe([_samples("n1", "node", names, [[5, 2, 3, 1.5, 100, 20, 1e9, 4, 7, 5, 8, 0.5, 9, 1]])])
    text = exporter.exposition().decode()
    assert 'cpu=""' not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert sum(s.value for s in families["causewatch_context_switches"].samples) == 5.0   # 2 + 3, not 10
    assert sum(s.value for s in families["node_cpu_seconds"].samples if s.labels["mode"] != "idle") == 9.0
    for name in ("task_clock_seconds", "context_switches", "page_faults", "cpu_migrations"):
        family = families[f"causewatch_{name}"]
        assert family.type == "counter" and {s.name for s in family.samples} == {f"causewatch_{name}_total"}
    assert (families["node_cpu_seconds"].type, families["node_load1"].type,
            families["node_vmstat_pgfault"].type) == ("counter", "gauge", "unknown")
    helps = {name: f.documentation for name, f in families.items() if name.startswith("causewatch_")}
    assert helps["causewatch_process_resident_memory_bytes"].startswith("Resident memory of the watched process")
    assert helps["causewatch_my_own_gauge"] == "my_own_gauge as an agent sent it (not one of causewatch's own metrics)"
    assert not [n for n, h in helps.items() if "as an agent sent it" in h and n != "causewatch_my_own_gauge"]


def test_every_metric_a_real_agent_sends_has_help():
    """The names a ProcessCollector of this machine sends, and every perf event; the node's are
    node_exporter's (tests/agent/test_node_names.py)."""
    process = ProcessCollector(os.getpid())
    process.collect()
    own = {f"agent_{k}_total" for k in ("frames_acked", "frames_nacked", "frames_refused", "frames_resent",
                                         "spool_dropped_frames")}
    names = {*process.collect(), *EVENTS, *DERIVED, "agent_collector_failure_info", *own}
    exported = {node_series(n)[0].removeprefix("causewatch_") for n in names}
    assert len(exported) >= 25
    unknown = sorted(n for n in exported if n not in node_metrics.HELP)
    assert not unknown, f"no HELP for {unknown}"


def test_newest_values_per_node_and_scope_with_last_seen(monkeypatch):
    exporter = Exporter()
    exporter.nodes.clock = lambda: 1234.5
    cpu = [wire.labelled("node_cpu_seconds_total", {"cpu": c, "mode": "user"}) for c in "01"]
    exporter.nodes.observe([
        _samples("n1", "node", [*cpu, "node_memory_MemFree_bytes"], [[1, 2, 100], [3, 4, 200]]),
        _samples("n2", "pid:7", ["process_threads", "process_open_fds"], [[5, float("nan")]]),
    ])
    families = {f.name: f for f in text_string_to_metric_families(exporter.exposition().decode())}
    assert families["node_cpu_seconds"].type == "counter"
    assert {(s.labels["cpu"], s.labels["mode"], s.value) for s in families["node_cpu_seconds"].samples} == {
        ("0", "user", 3.0), ("1", "user", 4.0)}
    memory = families["node_memory_MemFree_bytes"]
    assert [(s.labels["node"], s.labels["scope"], s.value) for s in memory.samples] == [("n1", "node", 200.0)]
    assert [s.value for s in families["causewatch_process_threads"].samples] == [5.0]
    assert "causewatch_process_open_fds" not in families                                   # the null is not shown
    seen = families["causewatch_agent_last_seen_timestamp_seconds"]
    assert {(s.labels["node"], s.value) for s in seen.samples} == {("n1", 1234.5), ("n2", 1234.5)}
    stored = families["causewatch_node_frames_stored"]
    assert {(s.labels["node"], s.value) for s in stored.samples} == {("n1", 1), ("n2", 1)}


def _shown(exporter) -> dict[tuple[str, str], float]:
    """(family, the series' mountpoint or device label or "") -> value of the node series at /metrics."""
    return {(f.name, s.labels.get("mountpoint") or s.labels.get("device", "")): s.value
            for f in text_string_to_metric_families(exporter.exposition().decode())
            for s in f.samples if f.name.startswith("node_")}


def test_a_series_the_agent_sends_no_more_leaves_and_other_batches_stay():
    """A disk or a mount that goes leaves /metrics with the next frame of its batch (node_exporter's
    next scrape would not have it); a batch of other names (a slower collector's) stays, and so does a
    series that is only null for now."""
    exporter = Exporter()

    def disks(*devices):
        return [wire.labelled("node_disk_reads_completed_total", {"device": d}) for d in devices]
    mounts = [wire.labelled("node_filesystem_avail_bytes", {"device": "/dev/vda1", "fstype": "ext4", "mountpoint": m})
              for m in ("/", "/scratch")]
    exporter.nodes.observe([_samples("n1", "node", [*disks("vda", "vdb"), "node_load1"], [[1, 2, 0.5]]),
                            _samples("n1", "node", mounts, [[10, 20]])])
    assert _shown(exporter) == {("node_disk_reads_completed", "vda"): 1, ("node_disk_reads_completed", "vdb"): 2,
                                ("node_load1", ""): 0.5, ("node_filesystem_avail_bytes", "/"): 10,
                                ("node_filesystem_avail_bytes", "/scratch"): 20}
    exporter.nodes.observe([_samples("n1", "node", [*disks("vda"), "node_load1"], [[3, float("nan")]])])
    exporter.nodes.observe([_samples("n1", "node", mounts[:1], [[11]])])
    assert _shown(exporter) == {("node_disk_reads_completed", "vda"): 3, ("node_filesystem_avail_bytes", "/"): 11}
    exporter.nodes.observe([_samples("n1", "node", [*disks("vda"), "node_load1"], [[4, 0.7]]),
                            _samples("n2", "node", [*disks("vdb")], [[9]])])   # another node: its own
    assert _shown(exporter) == {("node_disk_reads_completed", "vda"): 4, ("node_load1", ""): 0.7,
                                ("node_filesystem_avail_bytes", "/"): 11, ("node_disk_reads_completed", "vdb"): 9}


def test_a_repeated_name_list_keeps_its_newest_row():
    exporter = Exporter()
    exporter.nodes.observe([_samples("n1", "node", ["node_load1", "node_load5"], [[5, float("nan")]]),
                            _samples("n1", "node", ["node_load1", "node_load5"], [[7, 6]])])   # one batch
    assert _shown(exporter) == {("node_load1", ""): 7, ("node_load5", ""): 6}


def test_a_jobs_snapshot_replaces_its_previous_one_whole():
    exporter = Exporter()
    exporter.publish("j", [gauge_family("causewatch_x", "h", ["a"], [({"a": "1"}, 1.0), ({"a": "2"}, 2.0)])])
    exporter.publish("j", [gauge_family("causewatch_x", "h", ["a"], [({"a": "3"}, 3.0)])])
    text = exporter.exposition().decode()
    assert 'causewatch_x{a="3"} 3.0' in text and 'a="1"' not in text and 'a="2"' not in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing")
def test_promtool_accepts_the_whole_exposition():
    exporter = Exporter()
    cpu = wire.labelled("node_cpu_seconds_total", {"cpu": "0", "mode": "idle"})
    exporter.nodes.observe([_samples("n1", "node", [cpu, "node_load1", "node_vmstat_pgfault", "cycles.cpu0"],
                                     [[1, 0.5, 10, 3]])])
    exporter.frames_stored.labels("samples").inc()
    out = subprocess.run(["promtool", "check", "metrics"], input=exporter.exposition(), capture_output=True)
    assert out.returncode == 0, out.stdout + out.stderr

"""The node collectors on this machine's /proc and /sys, and on hostile copies of their files (truncated,
garbage, empty, missing); the schedule that keeps a failing or hung collector to itself."""

from __future__ import annotations

import math
import os
import shutil
import threading
import time
from collections import namedtuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from causewatch import wire
from causewatch.agent.node import clock, cpufreq, kernel, network, release, storage
from causewatch.agent.node.schedule import NodeCollectors, Spec, default_specs
from causewatch.config import NODE_COLLECTOR_INTERVALS, AgentConfig

# collector factory (given a proc root) -> the files under it that it reads, the first one made hostile
PROC_COLLECTORS = {
    kernel.Stat: ["stat"], kernel.LoadAvg: ["loadavg"], kernel.MemInfo: ["meminfo"], kernel.VmStat: ["vmstat"],
    kernel.Pressure: ["pressure/cpu", "pressure/io", "pressure/memory"], kernel.FileFd: ["sys/fs/file-nr"],
    kernel.Entropy: ["sys/kernel/random/entropy_avail", "sys/kernel/random/poolsize"],
    storage.DiskStats: ["diskstats"], storage.Filesystems: ["self/mounts"], network.NetDev: ["net/dev"],
    network.SoftNet: ["net/softnet_stat"], network.NetStat: ["net/netstat", "net/snmp"],
    network.SockStat: ["net/sockstat"], network.Arp: ["net/arp"], network.UdpQueues: ["net/udp", "net/udp6"],
    network.Conntrack: ["sys/net/netfilter/nf_conntrack_count", "sys/net/netfilter/nf_conntrack_max"],
}
GARBAGE = "garbage ::: not=a /proc file\n\x01\x02 12 ab\n"
ALL_REAL = [*PROC_COLLECTORS, lambda _: network.NetClass(), lambda _: cpufreq.CpuFreq(), lambda _: clock.Time(),
            lambda _: clock.Timex(), lambda _: release.Uname(), lambda _: release.OsRelease(),
            lambda _: release.SELinux()]


def _sane(values: dict) -> None:
    assert all(len(k) <= wire.MAX_NAME and wire.METRIC_NAME.fullmatch(k) for k in values), values
    assert all(isinstance(v, float) and math.isfinite(v) for v in values.values())


def _available(files: list[str]) -> bool:
    return all(os.access(os.path.join("/proc", f), os.R_OK) for f in files)


@pytest.mark.parametrize("make", ALL_REAL, ids=lambda m: getattr(m, "__name__", "sys"))
def test_each_collector_reads_this_machine(make):
    files = PROC_COLLECTORS.get(make, [])
    if not _available(files):
        pytest.skip(f"{files} not readable here")
    values = make("/proc").collect()
    _sane(values)
    if make not in (cpufreq.CpuFreq,) and getattr(make, "__name__", "") != "<lambda>":
        assert values


def test_the_values_agree_with_the_kernel_files():
    first_cpu = open("/proc/stat").read().splitlines()[1].split()   # read first: the counter only grows
    stat = kernel.Stat().collect()
    user = float(first_cpu[1]) / kernel.USER_HZ
    assert stat[wire.labelled("node_cpu_seconds_total", {"cpu": first_cpu[0][3:], "mode": "user"})] >= user
    mem = kernel.MemInfo().collect()
    total_kb = int(open("/proc/meminfo").readline().split()[1])
    assert mem["node_memory_MemTotal_bytes"] == total_kb * 1024
    assert set(kernel.LoadAvg().collect()) == {"node_load1", "node_load5", "node_load15"}
    root = [k for k in storage.Filesystems().collect() if k.startswith("node_filesystem_size_bytes")
            and wire.unlabelled(k)[1]["mountpoint"] == "/"]
    assert root, "the root filesystem is reported"


def _copy(tmp_path, files: list[str]) -> None:
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join("/proc", f), tmp_path / f)


@pytest.mark.parametrize("hostile", ["missing", "empty", "garbage", "truncated"])
@pytest.mark.parametrize("make", list(PROC_COLLECTORS), ids=lambda m: m.__name__)
def test_a_hostile_file_is_an_error_or_a_part_never_an_invented_series(tmp_path, make, hostile):
    files = PROC_COLLECTORS[make]
    if not _available(files):
        pytest.skip(f"{files} not readable here")
    _copy(tmp_path, files)
    good = set(make(str(tmp_path)).collect())
    target = tmp_path / files[0]
    text = target.read_text()
    if hostile == "missing":
        target.unlink()
    else:
        target.write_text({"empty": "", "garbage": GARBAGE, "truncated": text[:len(text) // 2]}[hostile])
    try:
        values = make(str(tmp_path)).collect()
    except (OSError, ValueError, IndexError) as e:
        assert str(e)
        return
    assert hostile == "truncated" and set(values) <= good, f"{hostile} gave {sorted(set(values) - good)[:5]}"


@pytest.mark.parametrize("make", [kernel.Stat, kernel.MemInfo, kernel.VmStat, storage.DiskStats, network.NetDev,
                                  network.NetStat], ids=lambda m: m.__name__)
def test_a_collector_that_kept_a_files_layout_follows_it_when_it_changes(tmp_path, make):
    """The layouts kept from one run to the next (names and places of the values) are checked each run: a
    file that lost a line reads as a new collector reads it, and garbage is still an error."""
    files = PROC_COLLECTORS[make]
    if not _available(files):
        pytest.skip(f"{files} not readable here")
    _copy(tmp_path, files)
    collector = make(str(tmp_path))
    collector.collect()
    target = tmp_path / files[0]
    lines = target.read_text().splitlines(keepends=True)
    cut = -2 if make is network.NetStat else -1    # netstat's lines are pairs: a header and its values
    target.write_text("".join(lines[:cut]))
    assert collector.collect() == make(str(tmp_path)).collect()
    if make is kernel.MemInfo:   # the same fields in another order
        target.write_text("".join(lines[::-1]))
        assert collector.collect() == make(str(tmp_path)).collect()
    target.write_text(GARBAGE)
    with pytest.raises((ValueError, IndexError)):
        collector.collect()


def test_cpufreq_and_throttles_from_a_sysfs_tree(tmp_path):
    for cpu, core in ((0, 0), (1, 0)):   # two threads of one core: one core count
        base = tmp_path / f"devices/system/cpu/cpu{cpu}"
        (base / "cpufreq").mkdir(parents=True)
        (base / "cpufreq/scaling_cur_freq").write_text(f"{1200000 + cpu}\n")
        (base / "cpufreq/cpuinfo_max_freq").write_text("3500000\n")
        (base / "thermal_throttle").mkdir()
        (base / "thermal_throttle/core_throttle_count").write_text("7\n")
        (base / "thermal_throttle/package_throttle_count").write_text("9\n")
        (base / "topology").mkdir()
        (base / "topology/core_id").write_text(f"{core}\n")
        (base / "topology/physical_package_id").write_text("0\n")
    values = cpufreq.CpuFreq(str(tmp_path)).collect()
    assert values[wire.labelled("node_cpu_scaling_frequency_hertz", {"cpu": "1"})] == 1200001000
    assert values[wire.labelled("node_cpu_frequency_max_hertz", {"cpu": "0"})] == 3.5e9
    assert values[wire.labelled("node_cpu_core_throttles_total", {"core": "0", "package": "0"})] == 7
    assert values[wire.labelled("node_cpu_package_throttles_total", {"package": "0"})] == 9
    assert len([k for k in values if k.startswith("node_cpu_core_throttles_total")]) == 1


class _Fixed:
    def __init__(self, name, values=None, error=None, gate: threading.Event | None = None):
        self.name, self.values, self.error, self.gate, self.calls = name, values or {}, error, gate, 0

    def collect(self):
        self.calls += 1
        if self.gate is not None:
            self.gate.wait()
        if self.error:
            raise self.error
        return dict(self.values)


def _success(row, collector):
    return row[wire.labelled("node_scrape_collector_success", {"collector": collector})]


def test_a_failing_collector_says_why_and_the_others_go_on():
    specs = [Spec(_Fixed("bad", error=OSError(2, "No such file")), 1.0, 0.5),
             Spec(_Fixed("good", {"node_load1": 0.5}), 1.0, 0.5)]
    nodes = NodeCollectors(specs)
    row = nodes.collect()[1.0]
    assert row["node_load1"] == 0.5 and _success(row, "good") == 1.0 and _success(row, "bad") == 0.0
    assert nodes.unavailable == {"bad": "FileNotFoundError: [Errno 2] No such file"}
    reasons = [wire.unlabelled(k)[1] for k in row if k.startswith("agent_collector_failure_info")]
    assert reasons == [{"collector": "bad", "reason": "FileNotFoundError: [Errno 2] No such file"}]
    nodes.close()


def test_a_hung_collector_stops_only_itself_and_comes_back_when_it_returns():
    gate = threading.Event()
    hung = _Fixed("hung", {"node_hung": 1.0}, gate=gate)
    after = _Fixed("after", {"node_after": 2.0})
    t = [0.0]
    nodes = NodeCollectors([Spec(hung, 1.0, 0.2), Spec(after, 1.0, 0.2)], monotonic=lambda: t[0] + time.monotonic())
    start = time.monotonic()
    row = nodes.collect()[1.0]
    assert time.monotonic() - start < 2.0                       # waited its budget, not for it
    assert row["node_after"] == 2.0 and _success(row, "hung") == 0.0 and "node_hung" not in row
    assert "over its budget" in nodes.unavailable["hung"]
    t[0] += 1.0
    row = nodes.collect()[1.0]
    assert row["node_after"] == 2.0 and _success(row, "hung") == 0.0
    assert "still running" in nodes.unavailable["hung"] and hung.calls == 1   # not started again
    gate.set()
    deadline = time.monotonic() + 5
    while hung.calls == 1 and time.monotonic() < deadline:
        t[0] += 1.0
        time.sleep(0.05)
        row = nodes.collect()[1.0]
    assert row.get("node_hung") == 1.0 and _success(row, "hung") == 1.0 and "hung" not in nodes.unavailable
    assert after.calls == hung.calls + 1                         # it missed the one tick it was still running
    nodes.close()


def test_each_collector_runs_at_its_own_interval():
    t = [100.0]
    fast, slow = _Fixed("fast", {"a": 1.0}), _Fixed("slow", {"b": 2.0})
    nodes = NodeCollectors([Spec(fast, 1.0, 0.5), Spec(slow, 10.0, 0.5)], monotonic=lambda: t[0])
    seen = []
    for _ in range(21):
        seen.append(sorted(nodes.collect()))
        t[0] += 1.0
    assert fast.calls == 21 and slow.calls == 3
    assert seen[0] == [1.0, 10.0] and seen[1] == [1.0] and seen[10] == [1.0, 10.0]
    nodes.close()


def test_open_says_how_each_fared_and_its_rows_go_with_the_first_collect():
    t = [100.0]
    good, bad, off = _Fixed("good", {"a": 1.0}), _Fixed("bad", error=ValueError("cut short")), _Fixed("off", {"c": 3.0})
    nodes = NodeCollectors([Spec(good, 10.0, 0.5), Spec(bad, 1.0, 0.5), Spec(off, 0.0, 0.5)], monotonic=lambda: t[0])
    assert nodes.open() == {"good": {"interval": 10.0, "state": "ok"},
                            "bad": {"interval": 1.0, "state": "ValueError: cut short"},
                            "off": {"interval": 0.0, "state": "off (collector_intervals.off = 0)"}}
    t[0] += 0.5
    rows = nodes.collect()
    assert rows[10.0]["a"] == 1.0 and good.calls == 1 and off.calls == 0   # open's run, not a second one
    assert sorted(rows) == [1.0, 10.0] and nodes.collect() == {}
    nodes.close()


def test_the_schedule_has_a_default_interval_for_each_collector_and_takes_the_configs():
    assert sorted(s.collector.name for s in default_specs()) == sorted(NODE_COLLECTOR_INTERVALS)
    cfg = AgentConfig(collector_intervals={"netstat": 0, "meminfo": 5})
    intervals = {s.collector.name: s.interval for s in default_specs(intervals=cfg.collector_intervals)}
    assert (intervals["netstat"], intervals["meminfo"], intervals["stat"]) == (0.0, 5.0, 1.0)


Statvfs = namedtuple("Statvfs", "f_bsize f_blocks f_bfree f_bavail f_files f_ffree")


def test_a_hung_remote_mount_is_reported_and_skipped_while_the_others_are_read(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "1/mounts").write_text("/dev/vda / ext4 rw,relatime 0 0\nsrv:/x /data/nfs nfs4 ro,hard 0 0\n"
                                       "proc /proc proc rw 0 0\n/dev/vdb /srv/with\\040space xfs rw 0 0\n")
    gate, calls = threading.Event(), []

    def statvfs(path):
        calls.append(path)
        if path == "/data/nfs":
            gate.wait()
        return Statvfs(4096, 100, 50, 40, 1000, 900)

    fs = storage.Filesystems(str(tmp_path), mount_timeout=0.1, statvfs=statvfs)

    def by_mount():
        return {(wire.unlabelled(k)[0], wire.unlabelled(k)[1]["mountpoint"]): v for k, v in fs.collect().items()}

    values = by_mount()
    assert values[("node_filesystem_size_bytes", "/")] == 409600
    assert values[("node_filesystem_avail_bytes", "/srv/with space")] == 40 * 4096
    assert values[("node_filesystem_device_error", "/data/nfs")] == 1.0
    assert values[("node_filesystem_readonly", "/data/nfs")] == 1.0
    assert ("node_filesystem_size_bytes", "/data/nfs") not in values and "/proc" not in calls
    assert by_mount()[("node_filesystem_device_error", "/data/nfs")] == 1.0
    assert calls.count("/data/nfs") == 1                          # skipped while its call hangs
    gate.set()
    deadline = time.monotonic() + 5
    while fs.stuck and time.monotonic() < deadline:
        time.sleep(0.01)
    assert by_mount()[("node_filesystem_size_bytes", "/data/nfs")] == 409600


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.text(max_size=30), max_size=4))
def test_a_labelled_name_is_a_wire_name_and_gives_its_labels_back(labels):
    metric = wire.labelled("node_filesystem_avail_bytes", labels)
    assert wire.METRIC_NAME.fullmatch(metric)
    assert wire.unlabelled(metric) == ("node_filesystem_avail_bytes", labels)

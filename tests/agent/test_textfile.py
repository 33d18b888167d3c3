"""The textfile collector on real *.prom files in a temporary directory: good ones, broken, timestamped,
removed, unreadable and hostile ones, and its series at the daemon's /metrics under their own names."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from causewatch import config, wire
from causewatch.agent.node import textfile
from causewatch.agent.node.schedule import NodeCollectors, default_specs
from causewatch.config import AgentConfig
from causewatch.daemon.exporter import Exporter
from causewatch.errors import ConfigError

GOOD = """# HELP apt_upgrades_pending Apt packages pending updates by origin.
# TYPE apt_upgrades_pending gauge
apt_upgrades_pending{arch="amd64",origin="Debian:bookworm/stable"} 3
apt_upgrades_pending{arch="all",origin="Debian:bookworm/stable"} 1
# a plain comment

backup_done_total 7
"""


def _series(name, **labels):
    return wire.labelled(wire.TEXTFILE + name, labels)


def _write(directory, file, text):
    (directory / file).write_text(text) if isinstance(text, str) else (directory / file).write_bytes(text)


def _mtime(file):
    return wire.labelled("node_textfile_mtime_seconds", {"file": file})


def test_good_files_give_their_series_their_mtimes_and_no_error(tmp_path):
    _write(tmp_path, "apt.prom", GOOD)
    _write(tmp_path, "ignored.txt", "not_read 1\n")
    out = textfile.Textfile(str(tmp_path)).collect()
    assert out[_series("apt_upgrades_pending", arch="amd64", origin="Debian:bookworm/stable")] == 3.0
    assert out[_series("apt_upgrades_pending", arch="all", origin="Debian:bookworm/stable")] == 1.0
    assert out[_series("backup_done_total")] == 7.0
    assert out[_mtime("apt.prom")] == float(int(os.stat(tmp_path / "apt.prom").st_mtime))
    assert out["node_textfile_scrape_error"] == 0.0
    assert not any("not_read" in k for k in out)


def test_a_broken_file_sets_the_error_names_itself_once_and_the_others_are_read(tmp_path, caplog):
    _write(tmp_path, "apt.prom", GOOD)
    _write(tmp_path, "broken.prom", "ok_metric 1\nbad{ 1\n")
    collector = textfile.Textfile(str(tmp_path))
    out = collector.collect()
    collector.collect()
    assert out["node_textfile_scrape_error"] == 1.0
    assert out[_series("backup_done_total")] == 7.0
    assert _mtime("broken.prom") not in out and _series("ok_metric") not in out   # the whole file is left out
    why = "line 2: not NAME{LABELS} VALUE"
    assert collector.field_states() == {"broken.prom": why}
    assert [r.message for r in caplog.records].count(f"textfile broken.prom left out: {why}") == 1


@pytest.mark.parametrize("text, why", [
    ("x 1 1700000000000\n", "timestamp"),
    ("# TYPE x gauge\n# TYPE x gauge\nx 1\n", "second TYPE"),
    ("x 1\n# TYPE x gauge\n", "after its samples"),
    ("# TYPE x meter\n", "unknown type"),
    ("x 1\nx 2\n", "same series again"),
    ("x 1_000\n", "no number"),
    ("bad metric line\n", "no number"),
    ('x{a="1",a="2"} 1\n', "given twice"),
    ('x{__name__="y"} 1\n', "reserved"),
    ('x{a="\\t"} 1\n', "invalid escape"),
    ('x{a="open} 1\n', "not NAME="),
    ("node_textfile_scrape_error 0\n", "agent's and the daemon's own"),
    ("causewatch_agent_up 1\n", "agent's and the daemon's own"),
    (b"\x00\xff\xfe junk\n", "not UTF-8"),
    ("".join(f"s{i} 1\n" for i in range(textfile.MAX_SERIES + 1)), f"more than {textfile.MAX_SERIES} series"),
])
def test_a_hostile_file_is_left_out_whole_with_its_reason(tmp_path, text, why):
    _write(tmp_path, "bad.prom", text)
    collector = textfile.Textfile(str(tmp_path))
    out = collector.collect()
    assert out == {"node_textfile_scrape_error": 1.0}
    assert why in collector.field_states()["bad.prom"]


def test_a_huge_file_is_refused(tmp_path):
    _write(tmp_path, "huge.prom", "# " + "x" * (4 * textfile.MAX_BYTES) + "\n")
    collector = textfile.Textfile(str(tmp_path))
    assert collector.collect() == {"node_textfile_scrape_error": 1.0}
    assert collector.field_states() == {"huge.prom": f"over {textfile.MAX_BYTES} bytes"}


def test_label_escapes_are_read_and_kept_through_the_wire_name(tmp_path):
    _write(tmp_path, "esc.prom", '# HELP x a \\\\ help\\n line\nx{path="C:\\\\dir",quote="say \\"hi\\"",nl="a\\nb",'
                                 'brace="}{",empty=""} +Inf\nx{path="y"} NaN\n')
    out = textfile.Textfile(str(tmp_path)).collect()
    metric = _series("x", path="C:\\dir", quote='say "hi"', nl="a\nb", brace="}{", empty="")
    assert out[metric] == float("inf")
    assert wire.unlabelled(metric)[1]["quote"] == 'say "hi"'
    assert out["node_textfile_scrape_error"] == 0.0


def test_a_family_unlike_an_earlier_files_or_a_series_again_leaves_the_later_file_out(tmp_path):
    _write(tmp_path, "a.prom", "# TYPE shared gauge\nshared{k=\"1\"} 1\n")
    _write(tmp_path, "b.prom", "# TYPE shared counter\nshared{k=\"2\"} 2\n")
    _write(tmp_path, "c.prom", "shared_other 1\n# TYPE shared gauge\nshared{k=\"1\"} 3\n")
    _write(tmp_path, "d.prom", "# TYPE shared gauge\nshared{k=\"4\"} 4\n")
    collector = textfile.Textfile(str(tmp_path))
    out = collector.collect()
    assert sorted(collector.field_states()) == ["b.prom", "c.prom"]
    assert out[_series("shared", k="1")] == 1.0 and out[_series("shared", k="4")] == 4.0
    assert _series("shared_other") not in out


def test_a_removed_file_takes_its_series_with_it(tmp_path):
    _write(tmp_path, "apt.prom", GOOD)
    _write(tmp_path, "other.prom", "other_metric 5\n")
    collector = textfile.Textfile(str(tmp_path))
    assert _series("backup_done_total") in collector.collect()
    (tmp_path / "apt.prom").unlink()
    out = collector.collect()
    assert not any(k.startswith(wire.TEXTFILE + "backup") or "apt.prom" in k for k in out)
    assert out[_series("other_metric")] == 5.0 and out["node_textfile_scrape_error"] == 0.0


def test_an_unreadable_directory_sets_the_error_and_says_so(tmp_path):
    collector = textfile.Textfile(str(tmp_path / "absent"))
    assert collector.collect() == {"node_textfile_scrape_error": 1.0}
    assert collector.field_states() == {"directory": f"cannot list {tmp_path / 'absent'}: No such file or directory"}


def test_off_without_a_directory_and_its_state_in_hello(tmp_path):
    nodes = NodeCollectors([s for s in default_specs() if s.collector.name == "textfile"])
    assert nodes.open() == {"textfile": {"interval": 0.0, "state": "off: no textfile_directory"}}
    nodes.close()
    _write(tmp_path, "bad.prom", "x 1 5\n")
    nodes = NodeCollectors([s for s in default_specs(textfile_directory=str(tmp_path))
                            if s.collector.name == "textfile"])
    state = nodes.open()["textfile"]
    nodes.close()
    assert state["interval"] == 10.0 and state["state"] == "ok" and "timestamp" in state["bad.prom"]


def test_the_series_reach_the_daemons_metrics_under_their_own_names(tmp_path):
    _write(tmp_path, "apt.prom", GOOD)
    _write(tmp_path, "esc.prom", 'node_directory_size_bytes{directory="/var/lib/\\"x\\""} 42\n')
    row = textfile.Textfile(str(tmp_path)).collect()
    body = wire.samples_body([1.0], list(row), [list(row.values())])
    exporter = Exporter()
    exporter.nodes.observe([wire.decode(wire.encode("samples", "n1", "node", 1, body))])
    families = {f.name: f for f in text_string_to_metric_families(exporter.exposition().decode())}
    apt = families["apt_upgrades_pending"]
    assert apt.type == "unknown"   # OpenMetrics' word for untyped
    assert {(s.labels["arch"], s.labels["node"], s.value) for s in apt.samples} == {("amd64", "n1", 3.0),
                                                                                   ("all", "n1", 1.0)}
    assert families["backup_done_total"].samples[0].value == 7.0
    assert families["node_directory_size_bytes"].samples[0].labels["directory"] == '/var/lib/"x"'
    assert families["node_textfile_scrape_error"].type == "gauge"
    assert {s.labels["file"] for s in families["node_textfile_mtime_seconds"].samples} == {"apt.prom", "esc.prom"}
    assert not any(n.startswith("causewatch_apt") or n.startswith("textfile") for n in families)


def test_the_agent_setting_names_the_directory_and_a_wrong_one_is_named_with_its_line(tmp_path):
    f = tmp_path / "agent.toml"
    f.write_text(f'[agent]\ntextfile_directory = "{tmp_path}"\n[agent.collector_intervals]\ntextfile = 60\n')
    cfg = config.load(AgentConfig, f, "agent")
    spec = next(s for s in default_specs(intervals=cfg.collector_intervals, textfile_directory=cfg.textfile_directory)
                if s.collector.name == "textfile")
    assert (spec.collector.directory, spec.interval, spec.off) == (str(tmp_path), 60.0, None)
    f.write_text("[agent]\ntextfile_directory = 5\n")
    with pytest.raises(ConfigError, match=f"{f}:2: textfile_directory: expected str"):
        config.load(AgentConfig, f, "agent")


def test_a_fifo_is_refused_without_blocking_and_the_directory_is_bounded(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "pipe.prom")
    monkeypatch.setattr(textfile, "MAX_TOTAL", 5)
    _write(tmp_path, "a.prom", "a1 1\na2 2\n")
    _write(tmp_path, "b.prom", "b1 1\nb2 2\nb3 3\n")
    collector = textfile.Textfile(str(tmp_path))
    out = collector.collect()
    assert collector.field_states() == {"b.prom": "its 3 series would take the collector past 5",
                                        "pipe.prom": "not a regular file"}
    assert out[_series("a2")] == 2.0 and _series("b1") not in out and out["node_textfile_scrape_error"] == 1.0


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.text(max_size=30), min_size=1,
                       max_size=4),
       st.floats(allow_nan=False))
def test_what_prometheus_clients_exposition_writes_reads_back_the_same(labels, value):
    registry = CollectorRegistry()
    Gauge("g", "a help with \\ and \n", list(labels), registry=registry).labels(**labels).set(value)
    families, series = textfile.parse(generate_latest(registry).decode())
    assert families == {"g": ("gauge", "a help with \\ and \n")}
    assert series == {wire.labelled(wire.TEXTFILE + "g", labels): value}


@given(st.binary(max_size=200))
def test_junk_is_read_or_refused_with_a_reason_never_a_crash(junk):
    try:
        textfile.parse(junk.decode(errors="replace"))
    except ValueError as e:
        assert str(e).startswith("line ")


def test_a_hostile_file_name_and_a_long_reason_stay_within_what_hello_carries(tmp_path):
    _write(tmp_path, "new\nline.prom", "x" * 5000 + " 1 2\n")
    collector = textfile.Textfile(str(tmp_path))
    assert collector.collect() == {"node_textfile_scrape_error": 1.0}
    states = collector.field_states()
    shown = ascii("new\nline.prom")
    assert list(states) == [shown] and len(states[shown]) == textfile.MAX_REASON
    state = {**states, "interval": 10.0, "state": "ok"}
    body = {"hostname": "h", "agent_version": "0", "collectors": {"textfile": state}}
    assert wire.decode(wire.encode("hello", "n1", "boot", 1, body)).body["collectors"]["textfile"] == state

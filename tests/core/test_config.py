"""Configuration: TOML read once, wrong keys and types named with their file."""

from pathlib import Path

import pytest

from causewatch import config
from causewatch.config import AgentConfig, DaemonConfig, is_loopback
from causewatch.errors import ConfigError


def test_file_then_flags(tmp_path):
    f = tmp_path / "d.toml"
    f.write_text('[daemon]\ndb = "/x.duckdb"\nbatch_max_frames = 64\n')
    cfg = config.load(DaemonConfig, f, "daemon", db="/y.duckdb", bind=None)
    assert (cfg.db, cfg.batch_max_frames, cfg.bind) == ("/y.duckdb", 64, config.DEFAULT_ENDPOINT)


@pytest.mark.parametrize("text, key, words", [
    ('[agent]\nwindow = "ten"\n', "window", "expected int, got str"),
    ('[agent]\nwindoe = 3\n', "windoe", "unknown setting"),
    ('[agent]\nwindow = true\n', "window", "expected int, got bool"),
    ('[agent\n', "config", "not valid TOML"),
    ('[agent]\nanswer_timeout = 0\n', "answer_timeout", "between 0.1 and 3600.0"),
])
def test_bad_settings_are_named(tmp_path, text, key, words):
    f = tmp_path / "a.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.load(AgentConfig, f, "agent")
    assert e.value.key == key and words in str(e.value) and str(f) in str(e.value)


@pytest.mark.parametrize("text, key, line, words", [
    ('[agent]\n[agent.collector_intervals]\nnetstat = 10\nnetstatt = 1\n', "collector_intervals.netstatt", 4,
     "no node collector of that name (known: arp, conntrack"),
    ('[agent]\ncollector_intervals = { netstat = "10" }\n', "collector_intervals.netstat", 2,
     "expected seconds (a number; 0 turns it off), got str '10'"),
    ('[agent]\npsutil_interval = 2.0\n[agent.collector_intervals]\nmeminfo = 1\n', "collector_intervals.meminfo", 4,
     "give 0 (off) or from psutil_interval (2 s, the tick node collectors run on) to 86400 s"),
    ('[agent]\n[agent.collector_intervals]\nstat = true\n', "collector_intervals.stat", 3, "got bool True"),
    ('[agent]\ncollector_intervals = 10\n', "collector_intervals", 2, "expected dict, got int"),
])
def test_bad_collector_intervals_are_named_with_their_line(tmp_path, text, key, line, words):
    f = tmp_path / "a.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        config.load(AgentConfig, f, "agent")
    assert e.value.key == key and e.value.where == f"{f}:{line}" and words in e.value.reason, str(e.value)


def test_collector_intervals_keep_the_defaults_of_those_not_named(tmp_path):
    f = tmp_path / "a.toml"
    f.write_text('[agent]\nwindow = 8\n[agent.collector_intervals]\nnetstat = 1\nnetclass = 0\n')
    cfg = config.load(AgentConfig, f, "agent")
    assert cfg.collector_intervals == {**config.NODE_COLLECTOR_INTERVALS, "netstat": 1.0, "netclass": 0.0}
    assert cfg.window == 8


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(AgentConfig, tmp_path / "nope.toml")


@pytest.mark.parametrize("endpoint, local", [
    ("tcp://127.0.0.1:5555", True), ("tcp://[::1]:5555", True), ("tcp://localhost:1", True),
    ("ipc:///tmp/x", True), ("tcp://0.0.0.0:5555", False), ("tcp://*:5555", False), ("tcp://10.1.2.3:9", False)])
def test_loopback_detection(endpoint, local):
    assert is_loopback(endpoint) is local


@pytest.mark.parametrize("key, value", [("max_queue_bytes", 1000), ("store_memory_bytes", 2**20)])
def test_memory_bounds_below_their_range_are_named(tmp_path, key, value):
    f = tmp_path / "d.toml"
    f.write_text(f"[daemon]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as e:
        config.load(DaemonConfig, f, "daemon")
    assert e.value.key == key and str(f) in str(e.value)


@pytest.mark.parametrize("env, spool", [
    ({}, "~/.cache/causewatch/spool"),
    ({"XDG_CACHE_HOME": "/home/ann/.var/cache"}, "/home/ann/.var/cache/causewatch/spool"),
    ({"XDG_CACHE_HOME": "relative/cache"}, "~/.cache/causewatch/spool"),   # the XDG spec: relative is ignored
    ({"STATE_DIRECTORY": "/var/lib/causewatch-agent", "XDG_CACHE_HOME": "/c"}, "/var/lib/causewatch-agent/spool"),
])
def test_the_default_spool_is_the_user_s_xdg_cache_or_a_unit_s_state_directory(monkeypatch, env, spool):
    """A user's agent spools in their XDG cache; one run by systemd with StateDirectory= in that directory
    (unacked frames are state), which systemd names in $STATE_DIRECTORY."""
    for var in ("XDG_CACHE_HOME", "STATE_DIRECTORY"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert AgentConfig().spool == spool
    assert config.load(AgentConfig, None, "agent").spool == spool


def test_the_shipped_unit_spools_in_its_state_directory():
    """The agent unit's config names the spool its unit keeps as state, the default there too."""
    root = Path(__file__).resolve().parents[2]
    unit = (root / "systemd" / "causewatch-agent.service").read_text()
    state = unit.split("StateDirectory=", 1)[1].split()[0]
    cfg = config.load(AgentConfig, root / "systemd" / "agent.toml", "agent")
    assert cfg.spool == f"/var/lib/{state}/spool"

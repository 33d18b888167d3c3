"""A plain (non-editable) install: every part imports from it, from any working directory, the part
rules of docs/architecture.md hold on it (import-linter contracts in pyproject.toml), and its agent
streams counters and IP samples with none of the daemon's libraries (numpy included) importable."""

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support import query

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    target = tmp_path_factory.mktemp("install") / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return target


def test_wheel_install_imports_every_part(site, tmp_path):
    code = ("import causewatch, causewatch.agent.sender, causewatch.daemon.server, causewatch.probe, "
            "causewatch.analytics.causal.pc; print(causewatch.__file__, causewatch.agent.sender.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); "
                          f"sys.path += {[p for p in sys.path if 'site-packages' in p]!r}; {code}"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert all(p.startswith(str(site)) for p in out.stdout.split())
    assert (site / "causewatch" / "analytics" / "causal").is_dir()
    assert not (site / "causewatch" / "agent").is_symlink()   # the parts are real folders once installed


def test_a_folder_named_causewatch_in_the_working_directory_does_not_shadow_the_package(tmp_path):
    (tmp_path / "causewatch").mkdir()   # e.g. running from the parent of a clone named causewatch
    out = subprocess.run([sys.executable, "-m", "causewatch.cli", "--version"], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("causewatch "), out.stderr


def _lint(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=site,
                          capture_output=True, text=True, timeout=120)


def test_the_part_rules_hold(site):
    out = _lint(site)
    assert out.returncode == 0 and "0 broken" in out.stdout, out.stdout + out.stderr


def test_a_crossed_wall_breaks_a_contract(site, tmp_path):
    broken = tmp_path / "site"
    shutil.copytree(site, broken, symlinks=False)
    runner = broken / "causewatch" / "agent" / "runner.py"
    runner.write_text(runner.read_text() + "\n\ndef _probe():\n    from causewatch.probe.run import handle_run_probe\n"
                      "    return handle_run_probe\n")
    out = _lint(broken)
    assert out.returncode != 0 and "the agent never imports the probe, the daemon or the analytics BROKEN" \
        in out.stdout, out.stdout


# what `pip install causewatch` (the core list) leaves out: the agent must run without any of it
DAEMON_ONLY = ("numpy", "pandas", "scipy", "pyarrow", "networkx", "numba", "llvmlite", "duckdb",
               "prometheus_client", "tqdm")
AGENT_ONLY = """
import sys
blocked, tried = {blocked!r}, set()


class NotInstalled:
    \"\"\"An agent-only install: these top-level packages cannot be imported.\"\"\"
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            tried.add(name)
            raise ModuleNotFoundError(f"No module named {{name!r}} (an agent-only install)", name=name)


sys.meta_path.insert(0, NotInstalled())
sys.path[:0] = [{site!r}]
sys.path += {paths!r}
from causewatch.cli import main
code = main(sys.argv[1:])
print("tried:", sorted(tried), "loaded:", sorted(m for m in sys.modules if m.partition(".")[0] in blocked))
sys.exit(code)
"""
BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: sum(range(1000))\n"


def test_the_core_dependencies_leave_numpy_and_the_daemon_libraries_out():
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower().replace("-", "_") for d in core}
    assert names == {"psutil", "pyzmq", "msgpack", "cxxfilt"}


def test_the_installed_agent_streams_counters_and_ip_samples_without_numpy(site, tmp_path, daemon_process):
    d = daemon_process()
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'[agent]\ndaemon = "{d.endpoint}"\nnode = "light"\nspool = "{tmp_path}/spool"\n'
                   f'ipc = "ipc://{tmp_path}/agent.sock"\nbbv_frequency = 1000\ncounters_interval = 0.1\n')
    code = AGENT_ONLY.format(blocked=DAEMON_ONLY, site=str(site),
                             paths=[p for p in sys.path if "site-packages" in p])
    r = subprocess.run([sys.executable, "-I", "-c", code, "agent", "--config", str(cfg), "--", sys.executable,
                        "-c", BUSY], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "tried: [] loaded: []", r.stdout
    d.stop()
    counters = json.loads(query(d.db, "SELECT counters FROM nodes WHERE node='light'")[0][0])
    assert counters["task_clock_seconds"] == "ok" and counters["bbv"] == "ok"
    metrics = {m for (m,) in query(d.db, "SELECT DISTINCT metric FROM samples WHERE node='light' AND scope "
                                         "LIKE 'cmd:%' AND value IS NOT NULL")}
    assert {"task_clock_seconds", "page_faults", "process_cpu_user_seconds_total"} <= metrics
    assert query(d.db, "SELECT count(*) FROM samples WHERE node='light' AND scope='node' "
                       "AND metric='memory_total_bytes'")[0][0] >= 1
    (vectors, samples), = query(d.db, "SELECT count(DISTINCT seq), sum(count) FROM bbv WHERE node='light' "
                                      "AND kind='native'")
    keys = [k for (k,) in query(d.db, "SELECT DISTINCT key FROM bbv WHERE node='light' AND kind='native'")]
    assert vectors >= 5 and samples >= 500 and any(k.startswith(("python", "libpython")) for k in keys), keys

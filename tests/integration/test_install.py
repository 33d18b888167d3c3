"""Installs of the checkout: an sdist holds each file once, the wheel built from it and the editable
install import only `causewatch`, every part imports from any working directory, and the installed
agent streams counters and IP samples with none of the daemon's libraries (numpy included) importable."""

import collections
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from support import package_folders, query

ROOT = Path(__file__).resolve().parents[2]
# the dependencies' folders: put on PYTHONPATH, their .pth files (the editable install) are not run
SITE_PACKAGES = [p for p in sys.path if "site-packages" in p]
NOT_PACKAGES = ("daemon", "agent", "probe", "analytics", "tests", "bench")   # part or checkout folders, not names
IMPORTABLE = ("import importlib, json\nfound = []\nfor name in {names!r}:\n    try:\n"
              "        importlib.import_module(name)\n        found.append(name)\n    except ImportError:\n"
              "        pass\nimport causewatch.agent.sender\n"
              "print(json.dumps([found, causewatch.agent.sender.__file__]))")


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    build = f"from setuptools import build_meta; build_meta.build_sdist({str(out)!r})"
    r = subprocess.run([sys.executable, "-c", build], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return next(out.glob("*.tar.gz"))


@pytest.fixture(scope="module")
def site(sdist, tmp_path_factory) -> Path:
    """The wheel built from the sdist, installed alone into a folder (no dependencies, no .pth files)."""
    target = tmp_path_factory.mktemp("install") / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        str(sdist)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return target


def _site_python(site: Path, code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -S`: the site and the dependencies on sys.path, none of this venv's .pth files (so not
    the editable install of the checkout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *SITE_PACKAGES]))
    return subprocess.run([sys.executable, "-S", *(("-c", code) if code else ()), *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def test_the_sdist_holds_each_file_once_at_its_checkout_path(sdist, site):
    with tarfile.open(sdist) as tar:
        members = [m.name.partition("/")[2] for m in tar.getmembers() if m.isfile()]
        sources = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith(".egg-info/SOURCES.txt")))
        listed = [line.removeprefix("./") for line in sources.read().decode().split()]
    for names in (members, listed):
        assert not [n for n, k in collections.Counter(names).items() if k > 1]
    product = {p.relative_to(ROOT).as_posix() for folder in package_folders().values()
               for p in folder.iterdir() if p.suffix in (".py", ".toml")}
    assert product <= set(members) and product <= set(listed)
    assert "causewatch/agent/sender.py" in members and not any(m.startswith("agent/") for m in members)
    record = (site / "causewatch-0.1.0.dist-info" / "RECORD").read_text().splitlines()
    assert sum(line.startswith("causewatch/agent/sender.py,") for line in record) == 1


def test_the_wheel_installs_only_causewatch(site, tmp_path):
    assert sorted(p.name for p in site.iterdir()) == ["bin", "causewatch", "causewatch-0.1.0.dist-info"]
    out = _site_python(site, IMPORTABLE.format(names=NOT_PACKAGES), tmp_path)
    assert out.returncode == 0, out.stderr
    found, sender = json.loads(out.stdout)
    assert found == [] and sender == str(site / "causewatch" / "agent" / "sender.py")


def test_the_editable_install_imports_only_causewatch(tmp_path):
    out = subprocess.run([sys.executable, "-c", IMPORTABLE.format(names=NOT_PACKAGES)], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    found, sender = json.loads(out.stdout)
    assert found == [] and sender == str(ROOT / "causewatch" / "agent" / "sender.py")


def test_wheel_install_imports_every_part(site, tmp_path):
    code = ("import causewatch, causewatch.agent.sender, causewatch.daemon.server, causewatch.probe, "
            "causewatch.analytics.causal.pc, causewatch.probe.workloads.masterworker; "
            "print(causewatch.__file__, causewatch.agent.sender.__file__)")
    out = _site_python(site, code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert all(p.startswith(str(site)) for p in out.stdout.split())
    assert (site / "causewatch" / "analytics" / "causal" / "kde_null.toml").is_file()


def test_a_folder_named_causewatch_in_the_working_directory_does_not_shadow_the_package(site, tmp_path):
    """Neither the console script nor `python -m` of a wheel install; `python -m` of the editable install
    is (docs/architecture.md, "Layout and packaging")."""
    (tmp_path / "causewatch").mkdir()   # e.g. running from the parent of a clone named causewatch
    script = subprocess.run([Path(sys.executable).with_name("causewatch"), "--version"], capture_output=True,
                            text=True, cwd=tmp_path, timeout=60)
    module = _site_python(site, "", tmp_path, "-m", "causewatch.cli", "--version")
    for out in (script, module):
        assert out.returncode == 0 and out.stdout.startswith("causewatch "), out.stderr


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
    code = AGENT_ONLY.format(blocked=DAEMON_ONLY, site=str(site), paths=SITE_PACKAGES)
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
                       "AND metric='node_memory_MemTotal_bytes'")[0][0] >= 1
    (vectors, samples), = query(d.db, "SELECT count(DISTINCT seq), sum(count) FROM bbv WHERE node='light' "
                                      "AND kind='native'")
    keys = [k for (k,) in query(d.db, "SELECT DISTINCT key FROM bbv WHERE node='light' AND kind='native'")]
    assert vectors >= 5 and samples >= 500 and any(k.startswith(("python", "libpython")) for k in keys), keys

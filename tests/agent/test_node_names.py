"""The node collectors' series as the daemon's /metrics shows them, beside the real node_exporter's
(Debian's prometheus-node-exporter) on this machine: a family both expose has the same name, type and
label names, and every family node_exporter has here is there."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support import free_port, wait_for

from causewatch import wire
from causewatch.agent.node.schedule import NodeCollectors, default_specs
from causewatch.daemon.exporter import Exporter

EXE = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
BOOKKEEPING = ("go_", "process_", "promhttp_", "node_exporter_build_info")
DAEMON_LABELS = {"node", "scope", "shard"}


def families(text: str) -> dict[str, tuple[str, frozenset]]:
    """name as written on its TYPE line -> (type, label names)."""
    out = {}
    for f in text_string_to_metric_families(text):
        name = f.name + "_total" if f.type == "counter" else f.name
        out[name] = (f.type, frozenset(k for s in f.samples for k in s.labels) - DAEMON_LABELS)
    return out


def ours(textfiles: str) -> dict[str, tuple[str, frozenset]]:
    nodes = NodeCollectors(default_specs(textfile_directory=textfiles))
    row = {k: v for values in nodes.collect().values() for k, v in values.items()}
    nodes.close()
    body = wire.samples_body([1.0], list(row), [list(row.values())])
    frame = wire.decode(wire.encode("samples", "n1", "boot", 1, body))
    exporter = Exporter()
    exporter.nodes.observe([frame])
    return {n: f for n, f in families(exporter.exposition().decode()).items() if not n.startswith("causewatch_")}


@pytest.fixture(scope="module")
def textfiles(tmp_path_factory) -> str:
    """One textfile directory for both: node_exporter's example file, a family of a name of its own."""
    directory = tmp_path_factory.mktemp("textfiles")
    (directory / "role.prom").write_text('# TYPE role untyped\nrole{role="application_server"} 1\n')
    return str(directory)


@pytest.fixture(scope="module")
def node_exporter(textfiles):
    if EXE is None:
        pytest.skip("prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)")
    port = free_port()
    proc = subprocess.Popen([EXE, f"--web.listen-address=127.0.0.1:{port}",
                             f"--collector.textfile.directory={textfiles}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def scrape():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None

    try:
        text = wait_for(scrape, timeout=15)
        yield {n: f for n, f in families(text).items() if not n.startswith(BOOKKEEPING)}
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.service
def test_shared_families_have_node_exporters_name_type_and_labels(node_exporter, textfiles):
    mine = ours(textfiles)
    shared = sorted(set(mine) & set(node_exporter))
    differ = {n: (mine[n], node_exporter[n]) for n in shared if mine[n] != node_exporter[n]}
    assert not differ, differ
    missing = sorted(set(node_exporter) - set(mine))
    assert not missing, f"node_exporter has {len(missing)} families the agent lacks: {missing}"
    assert len(shared) >= 200 and {"node_textfile_scrape_error", "node_textfile_mtime_seconds", "role"} <= set(shared)

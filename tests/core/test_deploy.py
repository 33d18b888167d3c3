"""deploy/: the alert rules pass promtool and its unit tests (each alert raised and resolved), and every
metric the rules or the dashboard name is exported by our code."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from causewatch import wire
from causewatch.agent.node.schedule import default_specs
from causewatch.daemon import node_metrics, routes, verbs  # noqa: F401 (routes binds the verbs' handlers)
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_probe import ProbeJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.store import create_views, migrate
from causewatch.daemon.store.results import register_kit
from causewatch.probe.registry import kit_row

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/causewatch-alerts.yml"
RULE_TESTS = ROOT / "deploy/prometheus/causewatch-alerts.test.yml"
DASHBOARD = ROOT / "deploy/grafana/causewatch-dashboard.json"
JOBS_BOARD = ROOT / "deploy/grafana/causewatch-jobs.json"
ALERTMANAGER = ROOT / "deploy/alertmanager/alertmanager.yml"
needs_amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool missing")
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing")

# Named by deploy/ ahead of the daemon: each entry is dropped here once
# the daemon exports it, and the test below fails until it is.
NOT_YET_EXPORTED: dict[str, str] = {}   # name -> what it will be, while deploy/ refers to it before the code does


@needs_promtool
def test_alert_rules_pass_promtool():
    r = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@needs_promtool
def test_each_alert_is_raised_and_resolved_by_promtools_unit_tests():
    r = subprocess.run(["promtool", "test", "rules", str(RULE_TESTS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    alerts = set(re.findall(r"alert: (\w+)", RULES.read_text()))
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert alerts and alerts == tested, f"alerts without a unit test: {sorted(alerts - tested)}"


def test_no_rule_reads_a_threshold_of_its_own_on_the_daemons_anomalies():
    rules = RULES.read_text()
    assert "causewatch_dependency_anomaly" in rules and "_bits" not in rules
    assert re.search(r"\{\{ \$labels\.job \}\}", rules) is None   # `job` is the scrape job's, not ours


@needs_promtool
def test_every_name_deploy_uses_passes_promtool_check_metrics():
    """Exposed as our code would (counters through prometheus_client, which adds _total), every name the
    rules and the dashboard use passes promtool's lint: base units, no _bits (it reads bits as data)."""
    registry = CollectorRegistry()
    text = RULES.read_text() + DASHBOARD.read_text() + JOBS_BOARD.read_text()
    for name in sorted(set(re.findall(r"causewatch_[a-z_]+", text))):
        if name.endswith("_total"):
            Counter(name.removesuffix("_total"), "help", registry=registry).inc()
        else:
            Gauge(name, "help", registry=registry).set(1)
    exposition = generate_latest(registry)
    r = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    bad = subprocess.run(["promtool", "check", "metrics"], capture_output=True,
                         input=b"# HELP causewatch_edge_strength_bits h\n# TYPE causewatch_edge_strength_bits gauge\n"
                               b"causewatch_edge_strength_bits 1\n")
    assert bad.returncode != 0 and b"base unit" in bad.stdout + bad.stderr   # the lint does run


@pytest.mark.parametrize("path", [RULES, DASHBOARD, JOBS_BOARD], ids=["rules", "dashboard", "jobs board"])
def test_named_metrics_are_exported(path):
    source = "\n".join(p.read_text() for part in ("daemon", "agent")
                       for p in (ROOT / "causewatch" / part).glob("*.py"))
    names = {re.sub(r"_total$", "", n) for n in re.findall(r"causewatch_[a-z_]+", path.read_text())}
    # the agents' metrics, named on /metrics by daemon/node_metrics.py
    agents = {"causewatch_" + k.removesuffix("_total") for k in node_metrics.HELP}
    exported = {n for n in names | set(NOT_YET_EXPORTED) if re.search(rf"\b{n}\b", source) or n in agents}
    assert names and not names - exported - set(NOT_YET_EXPORTED), \
        f"{path.name} names metrics no code exports: {sorted(names - exported - set(NOT_YET_EXPORTED))}"
    assert not exported & set(NOT_YET_EXPORTED), \
        f"now exported, drop from NOT_YET_EXPORTED: {sorted(exported & set(NOT_YET_EXPORTED))}"


def test_dashboard_links_the_model_picture_of_the_chosen_scope():
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert {"datasource", "daemon", "scope"} <= set(variables)
    svg = "${daemon}/api/model?scope=${scope:percentencode}&format=svg"
    assert any(svg in link["url"] for link in board["links"])
    assert any(svg in p.get("options", {}).get("content", "") for p in board["panels"])
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert any("causewatch_dependency_anomaly" in e for e in exprs)
    assert any("causewatch_edge_strength{" in e for e in exprs)
    # the node's CPU (per-CPU counters only, so a sum by node is CPUs in use) and memory, as node_exporter names them
    assert any(e.startswith("sum by (node) (rate(node_cpu_seconds_total{") for e in exprs)
    assert any("node_memory_MemAvailable_bytes" in e for e in exprs)
    assert not [e for e in exprs if re.search(r"causewatch_(cpu|memory|load|swap|disk|net)_", e)]   # the old names

    # the jobs' row: running units only, their CPU use and memory against what they were allocated
    assert any("rate(causewatch_unit_cpu_seconds_total{kind=\"job\"}" in e and "causewatch_unit_cpus" in e
               for e in exprs)
    assert any("causewatch_unit_memory_bytes" in e and "causewatch_unit_memory_limit_bytes" in e for e in exprs)


def test_the_jobs_board_repeats_a_row_per_job_over_series_the_exporter_has_with_their_labels():
    """deploy/grafana/causewatch-jobs.json: a row per chosen running job (repeated over `job_id`), each of
    its queries over series a real exporter shows for a running job, its steps and its anomalies, selected
    only by labels those series carry; the job's series go when the job ends."""
    import numpy as np

    from causewatch.daemon.exporter import gauge_family
    from causewatch.daemon.job_causal import ANOMALY_GAUGE
    board = json.loads(JOBS_BOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    [row] = [p for p in board["panels"] if p["type"] == "row"]
    assert row["repeat"] == "job_id" and variables["job_id"]["multi"] and "${daemon}/api/job?id=" in row["title"]
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])] + [variables["job_id"]["definition"]]

    exporter = Exporter()
    agent = {"unit_cpu_seconds_total": 1.0, "unit_memory_bytes": 1.0, "unit_memory_peak_bytes": 1.0,
             "unit_io_read_bytes_total": 1.0, "unit_io_written_bytes_total": 1.0,
             **{m: 1.0 for m in node_metrics.HELP if m.startswith(("unit_pressure_", "unit_perf_"))}}

    def frame(kind, body, seq):
        return wire.decode(wire.encode(kind, "n1", "b", seq, body))
    job = {"kind": "job", "event": "start", "start": 1.0, "job_id": "42", "user": "ann", "cpus": 2.0,
           "memory_bytes": 2**30}
    exporter.nodes.observe([
        frame("unit", {"unit": "job:42", **job}, 1), frame("unit", {"unit": "step:42.0", **job, "kind": "step"}, 2),
        *(frame("samples", wire.samples_body(np.array([1.0]), list(agent), np.array([list(agent.values())]), unit), n)
          for n, unit in ((3, "job:42"), (4, "step:42.0")))])
    exporter.publish("causal", [gauge_family(ANOMALY_GAUGE, "h", ["scope", "src", "dst", "kind", "evidence", "cause"],
                                             [({"scope": "app:lu@job:42", "src": "n", "dst": "duration",
                                                "kind": "markov_violation", "evidence": "", "cause": ""}, 1.0)])])
    shown = {s.name: s.labels for f in text_string_to_metric_families(exporter.exposition().decode())
             for s in f.samples}
    for expr in exprs:
        for name, matchers in re.findall(r"\b(causewatch_[a-z_]+)(?:\{([^}]*)\})?", expr):
            assert name in shown, f"{name} ({expr}): not on a real exporter's /metrics"
            used = set(re.findall(r"(\w+)\s*=~?", matchers))
            assert used <= set(shown[name]), f"{expr}: {name} has no label {sorted(used - set(shown[name]))}"
        for by in re.findall(r"by \(([^)]*)\)", expr):
            assert all(label.strip() in {"node", "unit", "kind", "job_id", "user"} for label in by.split(","))
    exporter.nodes.observe([frame("unit", {"unit": u, **job, "kind": u.split(":")[0], "event": "end", "end": 2.0}, n)
                            for n, u in ((5, "step:42.0"), (6, "job:42"))])
    assert not [line for line in exporter.exposition().decode().splitlines() if line.startswith("causewatch_unit")]


def _runs_here(spec) -> bool:
    """A collector that is on and can open here (NVML, say, cannot without a GPU)."""
    opener = getattr(spec.collector, "open", None)
    return not spec.off and (opener is None or opener() is None)


def test_named_node_exporter_metrics_are_what_the_agent_sends_here():
    """A node_exporter name the rules or the dashboard use is one the agent's node collectors send here."""
    sent = {wire.unlabelled(metric)[0] for spec in default_specs() if _runs_here(spec)
            for metric in spec.collector.collect()}
    named = set(re.findall(r"\bnode_[A-Za-z0-9_]+", RULES.read_text() + DASHBOARD.read_text() + JOBS_BOARD.read_text()))
    assert named and not named - sent, f"named in deploy/, not sent: {sorted(named - sent)}"


def _probed_store(path: Path) -> duckdb.DuckDBPyConnection:
    """A store with a kit of 8 tasks a run registered and two nodes' probe results (whole-run task-s)."""
    con = duckdb.connect(str(path))
    migrate(con)
    create_views(con)
    phase = {"phase": 0, "weight": 1.0, "input": {"id": "t", "type": "dict", "size": 5, "seed": 1},
             "ref_seconds": 0.05, "ref_lo": 0.04, "ref_hi": 0.06}
    register_kit(con, kit_row({"format": "causewatch-probe-kit/1", "app": "mw", "kit": "k1", "tasks": 8,
                               "worker": {"callable": "causewatch.probe.workloads.masterworker:run_task"},
                               "reference_seconds": 0.4, "reference_lo": 0.3, "reference_hi": 0.5,
                               "warmup": 0, "repeats": 2, "phases": [phase]}))
    con.executemany("INSERT INTO probe_results (node, boot, seq, ts, app, kit, predicted_seconds, lo, hi, ratio, "
                    "probe_seconds, phases) VALUES (?, 'b', 1, 1.0, 'mw', 'k1', ?, ?, ?, 1.0, 0.5, NULL)",
                    [("n1", 0.464, 0.4, 0.5), ("n2", 0.31, 0.3, 0.32)])
    return con


def test_the_predicted_task_time_panel_plots_ranks_seconds_per_task(tmp_path):
    """The panel read whole-run task-seconds (0.464) where `rank` said 0.058 s per task: it must read a
    series of the probe job's scrape whose value for each node is rank's per-task prediction."""
    board = json.loads(DASHBOARD.read_text())
    panel = next(p for p in board["panels"] if p["title"].startswith("Predicted task time"))
    (target,) = panel["targets"]
    assert re.fullmatch(r"causewatch_[a-z_]+", target["expr"]), "the panel plots one exported series as it is"
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"
    con = _probed_store(tmp_path / "cw.duckdb")
    ctx = JobContext(read=con.cursor, write=lambda fn: fn(con), send=lambda *a: False, exporter=Exporter())
    ProbeJob().run(ctx)
    scraped = {s.labels["node"]: s.value for f in text_string_to_metric_families(ctx.exporter.exposition().decode())
               for s in f.samples if s.name == target["expr"] and s.labels["app"] == "mw"}
    ranked = {n["node"]: n["task_seconds"] for n in verbs.RANK.call(con, app="mw")["nodes"]}
    assert scraped == pytest.approx(ranked) and ranked == pytest.approx({"n1": 0.058, "n2": 0.03875})


def test_every_rule_holds_before_it_fires_and_says_its_severity():
    """An on-call engineer is paged for what lasts, not at once (three of four anomalies had paged
    with no hold time); the anomaly alerts carry the link to the model picture."""
    rules = RULES.read_text().split("- alert: ")[1:]   # no YAML parser among our dependencies: by text
    assert len(rules) == 9
    for rule in rules:
        name = rule.split()[0]
        assert re.search(r"\n +for: \d+m\n", rule), f"{name} fires with no hold time (for:)"
        assert re.search(r"severity: (page|ticket)\b", rule), name
        if "expr: causewatch_dependency_anomaly" in rule:
            assert 'picture: "http://{{ $labels.instance }}/api/model?scope={{ $labels.scope | urlquery }}' \
                   '&format=svg"' in rule, name
            assert "{{ $labels.evidence }}" in rule and 'cause: "{{ $labels.cause }}"' in rule, name


@needs_amtool
@pytest.mark.parametrize("labels, receiver", [
    (["alertname=CausewatchMechanismChanged", "severity=page", "scope=app:lu"], "pager"),
    (["alertname=CausewatchModelChanged", "severity=ticket", "scope=app:lu"], "tickets"),
    (["alertname=CausewatchDaemonDown", "severity=page"], "pager"),
    (["alertname=CausewatchAgentSilent", "severity=ticket"], "tickets")])
def test_alertmanager_config_passes_amtool_and_routes_pages_to_the_pager(labels, receiver):
    r = subprocess.run(["amtool", "check-config", str(ALERTMANAGER)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={ALERTMANAGER}", *labels],
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.split() == [receiver], r.stdout + r.stderr


def test_alertmanager_groups_anomalies_by_scope():
    route = ALERTMANAGER.read_text().split("CausewatchModelChanged\"']\n")[1]
    assert route.splitlines()[0].strip() == "group_by: [scope]"


@needs_promtool
def test_the_sharded_scrape_recipe_passes_promtool():
    recipe = ROOT / "deploy/prometheus/scrape-shards.yml"
    r = subprocess.run(["promtool", "check", "config", str(recipe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.findall(r"labels: \{shard: (\w+)\}", recipe.read_text()) == ["a", "b", "c"]

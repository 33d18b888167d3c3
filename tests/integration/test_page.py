"""The page, for real: Debian's prometheus scrapes a real daemon and evaluates deploy/'s rules, Debian's
alertmanager routes with deploy/'s config, and a webhook served here receives the firing alert with its
labels, its first cause among them and in an annotation, when the daemon opens a dependency anomaly,
then the resolved one when the daemon resolves it.

Hold times and waits are shortened (for: 2s, scrape and evaluation every second, group_wait 1s); the
seconds from the anomaly's opening in the store to the webhook's POST are printed, not asserted (the
machine is shared: the goal, <= scrape + for + group_wait + 5 s, is read off this output).
"""

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from support import agent_config, free_port, lu_cycle, wait_for

from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.server import Daemon

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS, ALERTMANAGER = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
MISSING = [name for name, path in [("prometheus", PROMETHEUS), ("prometheus-alertmanager", ALERTMANAGER)] if not path]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"{' and '.join(MISSING)} missing")
HOLD, SCRAPE, GROUP_WAIT = 2, 1, 1   # seconds, in place of deploy/'s minutes


class Webhook:
    """Alertmanager's webhook receiver: each POST's JSON body and when it arrived (unix seconds)."""

    def __init__(self):
        self.posts: list[tuple[float, dict]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                posts.append((time.time(), body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str, alertname: str) -> list[tuple[float, dict]]:
        return [(t, a) for t, body in self.posts for a in body["alerts"]
                if a["status"] == status and a["labels"]["alertname"] == alertname]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _start(args: list[str], url: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT)
    if not wait_for(lambda: _ready(url) or proc.poll() is not None, timeout=60) or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"{args[0]} did not become ready: {log.read_text()[-2000:]}")
    return proc


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    folder = tmp_path_factory.mktemp("page")
    job = CausalJob(min_rows=50, min_new=20, max_rows=400, confirm=1)   # raised at its first finding: quicker
    # the page path, not the jobs worker's priority (tests/daemon/test_worker.py): at SCHED_IDLE beside a
    # loaded machine's loops its learns waited minutes
    d = Daemon(DaemonConfig(db=str(folder / "cw.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0",
                            analysis_nice=0), jobs=[job]).start()
    yield d, folder
    d.stop()


@pytest.fixture(scope="module")
def services(daemon, tmp_path_factory):
    """A webhook, alertmanager with deploy/'s config pointed at it, and prometheus with deploy/'s rules
    scraping the daemon: started once for the module, stopped by pid."""
    d, _ = daemon
    folder = tmp_path_factory.mktemp("services")
    hook = Webhook()
    am_port, prom_port = free_port(), free_port()
    config = (ROOT / "deploy/alertmanager/alertmanager.yml").read_text().replace("http://127.0.0.1:9096", hook.url)
    config = re.sub(r"group_wait: \w+", f"group_wait: {GROUP_WAIT}s", config)
    config = re.sub(r"group_interval: \w+", "group_interval: 1s", config)
    (folder / "alertmanager.yml").write_text(config)
    rules = re.sub(r"\bfor: \d+m\b", f"for: {HOLD}s", (ROOT / "deploy/prometheus/causewatch-alerts.yml").read_text())
    (folder / "rules.yml").write_text(rules)
    (folder / "prometheus.yml").write_text(f"""
global: {{scrape_interval: {SCRAPE}s, evaluation_interval: 1s}}
rule_files: [{folder / 'rules.yml'}]
alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}
scrape_configs:
  - job_name: causewatch
    static_configs: [{{targets: ['{d.http.address}']}}]
""")
    procs = []
    try:
        procs.append(_start([ALERTMANAGER, f"--config.file={folder / 'alertmanager.yml'}",
                             f"--storage.path={folder / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                             "--cluster.listen-address="], f"http://127.0.0.1:{am_port}", folder / "am.log"))
        procs.append(_start([PROMETHEUS, f"--config.file={folder / 'prometheus.yml'}",
                             f"--storage.tsdb.path={folder / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            f"http://127.0.0.1:{prom_port}", folder / "prometheus.log"))
        yield hook
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        hook.server.shutdown()


def test_an_open_anomaly_pages_through_prometheus_and_alertmanager_then_resolves(daemon, services, tmp_path,
                                                                                   capsys):
    d, _ = daemon
    hook = services
    sender = Sender(agent_config(tmp_path, d.endpoint, node="n1")).start()
    http = f"http://{d.http.address}"
    rng = np.random.default_rng(11)

    def cycle(count: int, changed: bool) -> list[dict]:
        return lu_cycle(d, sender, rng, count, changed)

    try:
        assert cycle(300, False) == [] and cycle(40, False) == []     # a model, then a baseline
        for _ in range(3):   # changed tasks until the daemon opens the anomaly
            opened = cycle(80, True)
            if opened:
                break
        # one voice: one anomaly of the task time (its new dependency on n raised with it or related to it)
        [page] = opened
        assert page["dst"] == "duration"
        assert wait_for(lambda: hook.alerts("firing", "CausewatchAnomalousDependency"), timeout=120, every=0.1), \
            f"no page in 120 s; the webhook got {hook.posts}"
        posted, alert = hook.alerts("firing", "CausewatchAnomalousDependency")[0]
        labels = alert["labels"]
        assert {k: labels[k] for k in ("severity", "scope", "src", "dst", "kind", "job")} == {
            "severity": "page", "scope": "app:lu", "src": page["src"], "dst": "duration", "kind": page["kind"],
            "job": "causewatch"}
        assert re.fullmatch(r"duration (depends on n given its parents|median [0-9.]+ -> [0-9.]+ given its causes): "
                            r"[0-9.]+ bits > [0-9.]+ on 80 rows", labels["evidence"]), labels["evidence"]
        assert labels["picture"] == f"http://{d.http.address}/api/model?scope=app%3Alu&format=svg"
        # the first of its ranked causes, as the store has it: nothing beside the tasks sent samples, and the
        # task time moved beyond what its causes explain
        stored = page["evidence"]
        assert labels["cause"] == alert["annotations"]["cause"] == stored["cause"] == stored["causes"][0]["unit"] \
            == "duration", (labels, stored.get("causes_ranked"))
        assert f"First cause: {labels['cause']}." in alert["annotations"]["description"]
        with urllib.request.urlopen(labels["picture"], timeout=30) as reply:   # the link an engineer opens
            picture = reply.read().decode()
        assert "<svg" in picture and "duration" in picture
        page_s = posted - page["opened"]
        for _ in range(8):   # back to the baseline's mechanism until the daemon resolves it
            if page["anomaly_id"] not in {a["anomaly_id"] for a in cycle(80, False)}:
                break
        with urllib.request.urlopen(f"{http}/api/anomalies?scope=app:lu", timeout=10) as reply:
            resolved_in_store = next(a["resolved"] for a in json.load(reply)
                                     if a["anomaly_id"] == page["anomaly_id"])
        assert resolved_in_store is not None
        assert wait_for(lambda: hook.alerts("resolved", "CausewatchAnomalousDependency"), timeout=120, every=0.1), \
            f"no resolved notification in 120 s; the webhook got {len(hook.posts)} posts"
        resolved_at, gone = hook.alerts("resolved", "CausewatchAnomalousDependency")[0]
        assert gone["labels"]["evidence"] == labels["evidence"] and gone["labels"]["cause"] == labels["cause"]
        assert gone["endsAt"] >= alert["startsAt"]
        with capsys.disabled():
            print(f"\npage: anomaly opened in the store -> webhook POST {page_s:.1f} s (scrape {SCRAPE} s, "
                  f"for {HOLD} s, group_wait {GROUP_WAIT} s: goal <= {SCRAPE + HOLD + GROUP_WAIT + 5} s); "
                  f"resolved in the store -> POST {resolved_at - resolved_in_store:.1f} s")
    finally:
        sender.close()

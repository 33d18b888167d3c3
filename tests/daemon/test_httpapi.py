"""The live daemon's HTTP side: /api/stats, PERFQL and bottlenecks over what agents sent, /metrics."""

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from support import agent_config, wait_for

from causewatch.agent.sender import Sender
from causewatch.config import DaemonConfig
from causewatch.daemon.job_fuzzy import FuzzyJob
from causewatch.daemon.server import Daemon
from causewatch.daemon.worker import WorkerError

# Truong & Fahringer, soft-computing-performance-analysis: L2 miss ratios of Fig. 5's regions.
REGIONS = {"PARTICLE_LOAD": 0.9497242344418835, "MPI_SEND": 0.6550124668722567, "FIELD_SOLVE": 0.2}


@pytest.fixture
def live(tmp_path):
    d = Daemon(DaemonConfig(db=str(tmp_path / "h.duckdb"), bind="tcp://127.0.0.1:0", http="127.0.0.1:0",
                            analysis_nice=0), jobs=[FuzzyJob()]).start()   # the route, not the worker's priority
    s = Sender(agent_config(tmp_path, d.endpoint, "n1")).start()
    for name, ratio in REGIONS.items():
        s.send("region", {"app": "3dpic", "region": name, "start": time.time() - 5, "duration": 1.0, "calls": 1,
                          "counters": {"L2_TCM": ratio, "L2_TCA": 1.0}})
    assert s.flush(10)
    s.close()
    yield d
    d.stop()


def get(d, path, **params):
    url = f"http://{d.http.address}{path}" + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_perfql_over_the_live_store(live):
    # default l2_miss_ratio terms: high = S(0.6, 0.9), so 0.95 -> 1 and 0.655 -> ~0.07 (< min_degree)
    code, body = get(live, "/api/query", q="(L2_TCM/L2_TCA is high)", min_degree="0.1")
    rows = json.loads(body)
    assert code == 200 and [(r["region"], r["degree"]) for r in rows] == [("PARTICLE_LOAD", 1.0)]
    code, body = get(live, "/api/query", q="(L2_TCM/L2_TCA is low) OR (L2_TCM/L2_TCA is very high)",
                     min_degree="0.1")
    assert [r["region"] for r in json.loads(body)] == ["FIELD_SOLVE", "PARTICLE_LOAD"]


def test_bad_perfql_is_a_400_naming_the_column(live):
    code, body = get(live, "/api/query", q="(L2_TCM is )")
    assert code == 400 and "column" in json.loads(body)["error"]
    assert get(live, "/api/query")[0] == 400
    assert get(live, "/api/query", q="(L2_TCM is high)", top="many")[0] == 400


def test_bottlenecks_route_and_gauge_after_a_cycle(live):
    code, body = get(live, "/api/bottlenecks")
    found = {(r["region"], r["metric"]): r for r in json.loads(body)}
    assert code == 200 and found[("PARTICLE_LOAD", "l2_miss_ratio")]["severity"] == pytest.approx(0.495, abs=1e-3)
    live.scheduler.run_all()
    metrics = get(live, "/metrics")[1]
    assert ('causewatch_bottleneck_severity{app="3dpic",metric="l2_miss_ratio",node="n1",region="PARTICLE_LOAD"} 0.49'
            in metrics)


def test_stats_and_unknown_route(live):
    stats = json.loads(get(live, "/api/stats")[1])
    assert stats["tables"]["regions"] == 3 and stats["tables"]["nodes"] == 0
    code, body = get(live, "/api/nope")
    assert code == 404 and "/api/query" in body


def test_routes_answer_while_the_jobs_worker_is_busy(live):
    """The API has its own worker: a route answers while a long request runs in the jobs worker,
    from a third process (neither the daemon nor the jobs worker)."""
    def sleep_in_the_worker():
        with pytest.raises(WorkerError):   # cut short by the stop below
            live.jobs_worker(time.sleep, 20)

    busy = threading.Thread(target=sleep_in_the_worker, daemon=True)
    busy.start()
    assert wait_for(lambda: live.jobs_worker.pid is not None)
    code, body = get(live, "/api/stats")
    assert busy.is_alive()   # the jobs worker is still in its request
    assert code == 200 and json.loads(body)["tables"]["regions"] == 3
    assert live.api_worker.pid not in (None, live.jobs_worker.pid, os.getpid())
    live.jobs_worker.stop()
    busy.join(10)

"""Causal learns on a real dask.distributed LocalCluster (two worker processes, started once for the
module): the model equals the local one's, also through the daemon's jobs worker; a worker killed
mid-learn costs a counted re-run, never the model; an unreachable scheduler leaves the learn to the
jobs worker, with one clear error. And `analysis_scheduler`'s checks."""

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import free_port, wait_for
from task_rows import ingest_tasks, lu_tasks

from causewatch import config
from causewatch.cli import main
from causewatch.config import DaemonConfig
from causewatch.daemon.calls import Entry
from causewatch.daemon.compute import DaskCompute, LocalCompute
from causewatch.daemon.entrypoints import default_jobs
from causewatch.daemon.exporter import Exporter
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.jobs import JobContext
from causewatch.daemon.scheduler import LocalJobs, WorkerJobs
from causewatch.daemon.store import Store
from causewatch.daemon.worker import PRELOAD, Host, Worker
from causewatch.errors import ConfigError

pytestmark = pytest.mark.service   # a Dask LocalCluster

distributed = pytest.importorskip("distributed", reason="dask.distributed missing — `pip install -e "
                                  "'.[cluster]'` (the cluster tests need a real LocalCluster)")
dask = pytest.importorskip("dask")
cloudpickle = pytest.importorskip("cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])   # _slow_once reaches the workers by value
# A scheduler serves HTTP even without a dashboard, on 8787 unless told: the second cluster here warned
# "Port 8787 is already in use". Any free port will do.
EPHEMERAL = ":0"

BATCHES = [(0, 0, 300, False), (1, 300, 30, False)]   # a fit, then a partial_fit (with its Markov check)
MODELS = "SELECT m.n_rows, e.src, e.dst, e.directed, round(e.strength, 9) FROM models m JOIN edges e " \
         "USING (model_id) ORDER BY ALL"
ANOMALIES = "SELECT kind, src, dst FROM anomalies ORDER BY ALL"


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes, forked from the daemon's fork server as its own workers are (worker.PRELOAD:
    the analysis stack loaded once): spawned, as `dask worker` does, each imports that stack itself, which
    took 10-25 s of wall time under this machine's load."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    multiprocessing.forkserver.ensure_running()
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                     dashboard_address=EPHEMERAL) as c:
        yield c


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """What the job stores when it learns in its own process, batch by batch (models, anomalies)."""
    store = Store(str(tmp_path_factory.mktemp("local") / "cw.duckdb"))
    try:
        runner = LocalJobs([CausalJob(min_new=20, confirm=1)], _ctx(store))
        stored = []
        for batch in BATCHES:
            ingest_tasks(store, lu_tasks(*batch))
            runner.run("causal")
            stored.append(_stored(store))
        return stored
    finally:
        store.close()


def _ctx(store):
    return JobContext(read=store.cursor, write=store.run, send=lambda *a: True, exporter=Exporter())


def _stored(store):
    cur = store.cursor()
    return cur.execute(MODELS).fetchall(), cur.execute(ANOMALIES).fetchall()


def test_the_daemons_jobs_worker_learns_on_the_cluster_what_it_learns_locally(cluster, local, tmp_path):
    """The daemon's way: analysis_scheduler in the config, the jobs in a worker process (reads and writes
    through a worker.Host over the store); only `learn` runs on the cluster."""
    store, exporter = Store(str(tmp_path / "cw.duckdb")), Exporter()
    cfg = DaemonConfig(db=str(tmp_path / "cw.duckdb"), causal_confirm=1, analysis_scheduler=cluster.scheduler_address)
    worker = Worker(niceness=0, host=Host(store.cursor, store.run, lambda *a: True, exporter),
                    setup=(Entry.INSTALL_JOBS, (cfg, None)))   # the daemon's jobs, built from cfg in the worker
    runner = WorkerJobs(worker)
    try:
        runner.schedule()
        for batch, expected in zip(BATCHES, local):
            ingest_tasks(store, lu_tasks(*batch))
            runner.run("causal")
            assert _stored(store) == expected
        metrics = exporter.exposition().decode()
        assert 'causewatch_analysis_tasks_total{where="cluster"} 2.0' in metrics
        assert 'causewatch_analysis_tasks_total{where="local"} 0.0' in metrics
        assert 'causewatch_analysis_fallbacks_total{reason="unreachable"} 0.0' in metrics
    finally:
        worker.stop()
        store.close()


def _slow_once(marker: str, fn, *args):
    """The first run writes its process id to `marker` and sleeps, to be killed; a re-run does fn's work."""
    if not os.path.exists(marker):
        Path(marker + ".tmp").write_text(str(os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(300)
    return fn(*args)


class _SlowOnce(DaskCompute):
    def __init__(self, address: str, marker: str):
        super().__init__(address)
        self.marker = marker

    def map(self, fn, calls):
        return super().map(_slow_once, [(self.marker, fn, *args) for args in calls])


def test_a_worker_killed_mid_learn_costs_a_counted_rerun_not_the_model(cluster, local, tmp_path):
    store, marker = Store(str(tmp_path / "cw.duckdb")), str(tmp_path / "running")
    pids = {w.process.pid for w in cluster.workers.values()}
    killed = []

    def kill():   # the learn's worker process, once it is under way
        wait_for(lambda: os.path.exists(marker), timeout=120)
        killed.append(int(Path(marker).read_text()))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        ctx = _ctx(store)
        compute = _SlowOnce(cluster.scheduler_address, marker)
        ingest_tasks(store, lu_tasks(*BATCHES[0]))
        LocalJobs([CausalJob(min_new=20, confirm=1, compute=compute)], ctx).run("causal")
        killer.join(5)
        assert killed and killed[0] in pids   # one of the cluster's worker processes died mid-learn
        assert compute.retried == {"worker_lost": 1, "error": 0} and compute.tasks["cluster"] == 1
        assert _stored(store) == local[0]     # one model, whole, as the local one
        assert 'causewatch_analysis_task_retries_total{cause="worker_lost"} 1.0' in ctx.exporter.exposition().decode()
    finally:
        store.close()


def test_an_unreachable_scheduler_leaves_the_learn_to_the_jobs_worker(local, tmp_path, caplog):
    store, address = Store(str(tmp_path / "cw.duckdb")), f"tcp://127.0.0.1:{free_port()}"
    compute = DaskCompute(address, connect_timeout=0.5)
    runner = LocalJobs([CausalJob(min_new=20, confirm=1, compute=compute)], _ctx(store))
    try:
        for batch, expected in zip(BATCHES, local):
            ingest_tasks(store, lu_tasks(*batch))
            runner.run("causal")
            assert _stored(store) == expected
    finally:
        store.close()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR" and r.name.startswith("causewatch")]
    assert len(errors) == 1 and f"analysis scheduler {address}: cannot reach it" in errors[0]   # once an outage
    assert "run in the jobs worker instead" in errors[0]
    assert compute.fallbacks["unreachable"] == 2 and compute.tasks == {"local": 2, "cluster": 0}


def test_analysis_scheduler_is_checked_and_chooses_the_compute(tmp_path, capsys):
    assert isinstance(default_jobs(DaemonConfig())[0].compute, LocalCompute)
    chosen = default_jobs(DaemonConfig(analysis_scheduler="tcp://sched.example:8786"))[0].compute
    assert isinstance(chosen, DaskCompute) and chosen.address == "tcp://sched.example:8786"
    for bad in ("sched:8786", "http://sched:8786", "tcp://sched", "tcp://:8786", "tcp://sched:99999"):
        with pytest.raises(ConfigError, match="not a Dask scheduler address"):
            config.load(DaemonConfig, analysis_scheduler=bad)
    assert main(["daemon", "--db", str(tmp_path / "cw.duckdb"), "--analysis-scheduler", "sched:8786"]) == 2
    err = capsys.readouterr().err
    assert "--analysis-scheduler: 'sched:8786' is not a Dask scheduler address" in err and "tcp://HOST:PORT" in err


def test_learn_command_learns_a_file_on_the_cluster_as_here(cluster, tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 300)
    y = x ** 2 + rng.normal(0, 1, 300)
    pd.DataFrame({"x": x, "y": y, "z": np.sin(y) + rng.normal(0, 0.1, 300)}).to_csv(tmp_path / "runs.csv", index=False)
    learnt = []
    for extra in ([], ["--analysis-scheduler", cluster.scheduler_address]):
        assert main(["learn", str(tmp_path / "runs.csv"), "--json", *extra]) == 0
        learnt.append(json.loads(capsys.readouterr().out))
    assert learnt[0] == learnt[1] and learnt[0]["edges"]
    unreachable = f"tcp://127.0.0.1:{free_port()}"   # asked for a cluster, the command says it cannot have it
    assert main(["learn", str(tmp_path / "runs.csv"), "--analysis-scheduler", unreachable, "--json"]) == 2
    assert f"--analysis-scheduler: analysis scheduler {unreachable}: cannot reach it" in capsys.readouterr().err
    assert main(["learn", "tasks", "--analysis-scheduler", cluster.scheduler_address]) == 2
    assert "applies to a file's table" in capsys.readouterr().err


def test_a_scheduler_without_workers_leaves_the_learn_to_the_jobs_worker(local, tmp_path, caplog):
    store = Store(str(tmp_path / "cw.duckdb"))
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=EPHEMERAL) as empty:
        compute = DaskCompute(empty.scheduler_address)
        try:
            ingest_tasks(store, lu_tasks(*BATCHES[0]))
            LocalJobs([CausalJob(min_new=20, confirm=1, compute=compute)], _ctx(store)).run("causal")
            assert _stored(store) == local[0]
        finally:
            compute.close()
            store.close()
    assert compute.fallbacks["no_workers"] == 1 and compute.tasks == {"local": 1, "cluster": 0}
    assert any(f"analysis scheduler {empty.scheduler_address}: it has no workers" in r.getMessage()
               for r in caplog.records if r.levelname == "ERROR")


def test_map_gives_each_call_its_result_or_its_error():
    assert LocalCompute().map(int, [("1",), ("x",), ("3",)])[::2] == [1, 3]
    assert isinstance(LocalCompute().map(int, [("x",)])[0], ValueError)


def test_the_scopes_of_one_run_learn_side_by_side_on_the_cluster(cluster, tmp_path):
    """Two apps due in one run: both learns are handed over at once, and each model is the one the job
    learns for it locally."""
    stores = [Store(str(tmp_path / f"{name}.duckdb")) for name in ("local", "cluster")]
    computes = [LocalCompute(), DaskCompute(cluster.scheduler_address)]
    try:
        for store, compute in zip(stores, computes):
            for seed, (app, count) in enumerate([("mg", 70), ("ft", 60)]):   # small: quick learns
                ingest_tasks(store, lu_tasks(seed, 0, count).assign(app=app, node=app))
            LocalJobs([CausalJob(min_new=20, confirm=1, compute=compute)], _ctx(store)).run("causal")
        learnt = [s.cursor().execute("SELECT scope, " + MODELS.removeprefix("SELECT ")).fetchall() for s in stores]
        assert learnt[0] == learnt[1] and {r[0] for r in learnt[0]} == {"app:mg", "app:ft"}
        assert computes[1].tasks == {"local": 0, "cluster": 2}
    finally:
        computes[1].close()
        for s in stores:
            s.close()

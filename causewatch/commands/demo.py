"""`causewatch demo`: the whole system on embedded defaults, end to end, with a report.

A daemon on a DuckDB file under the demo folder, a local agent watching a phased master-worker
workload, live progress while data arrives, then what was stored and what the analyses made of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from causewatch.config import DaemonConfig
from causewatch.errors import InputError

MARK = ".causewatch-demo"   # written into a folder the demo made, so a later run may empty it
SEED = 1                    # the workload's and the probe kit's seeds: the same tasks run to run
PROBE_WAIT = 60.0           # seconds the workload waits for the agents' probes at most
# The watched command waits for a file before it becomes the workload (exec: the agent's counters follow):
# the agents' probes run at their hello and must not share the cores with the workload they predict.
WAIT_THEN_EXEC = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.1)\n" \
                 "os.execv(sys.argv[2], sys.argv[2:])"
# The contention hog: one busy process pinned to each CPU the workload may use.
HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"
# The causal job learns every few seconds here (a daemon's default is a minute): the baseline is set
# in the calm start, and the hog's departure is confirmed, raised and resolved within the run.
# Its jobs worker runs at normal priority and is never paused for ingest: the workload keeps both
# cores of a small demo machine busy, and at the daemon's defaults (SCHED_IDLE, paused while frames wait
# for the writer) the models would only be learnt after it ends.
# Each check of new dependencies judges at least 40 new tasks: fewer are a run or two of one task type.
CAUSAL = {"causal_interval": 3.0, "causal_min_new": 40, "causal_confirm": 2, "analysis_nice": 0,
          "analysis_pause_max": 0.0}
# Samples older than 20 s move to the Parquet lake (a daemon's default is an hour), so the demo's store
# shows both tiers and what a value costs in each.
STORE = {"store_hot_seconds": 20.0, "compaction_interval": 5.0}
HOG_CYCLES = 6              # model versions learnt while the hog runs: its first batch is part calm, and a
                            # finding is raised on the 2nd check in a row that sees it (4 stopped it first)
HOG_UNTIL = 0.75            # ...or until this share of the workload's tasks is stored: the end stays calm
PIN_AT = 0.35               # no stable baseline by this share of the tasks: pin the newest calm model
SCOPE = "app:demo"
STABLE = 0.8                # an edge held by this share of the run's model versions (and not weak) is stable
WAIT = "cpu_wait_seconds"   # the contended resource's variable in each task record

EPILOG = """examples:
  causewatch demo                      # about 80 s, files under ./demo-out
  causewatch demo --seconds 60 --dir /tmp/cw-demo
  causewatch demo --json               # the final report as JSON
"""

def add_arguments(p):
    p.add_argument("--dir", default="demo-out",
                   help="demo folder (DuckDB file, spool, kits): a new or empty one, or one an earlier demo made")
    p.add_argument("--seconds", type=float, default=30.0,
                   help="how long the agent streams on an idle machine, 20 tasks a second (default 30: a calm "
                        "start, the hog, a calm end)")
    p.add_argument("--json", action="store_true", help="print the final report as JSON")


def _build_kit(folder: Path, quiet: bool) -> None:
    """A probe kit for the demo app (registered once the daemon runs, so new agents get probed on hello)."""
    if not quiet:
        print("building the probe kit for app 'demo' (reference runs of the workload)…", flush=True)
    subprocess.run([sys.executable, "-m", "causewatch.cli", "probe", "build", "demo", "--workload", "masterworker",
                    "--tasks", "40", "--task-seed", str(SEED), "--seed", str(SEED), "--out", str(folder / "kit"),
                    # a demo runs wherever it is started: it keeps a noisy kit (its manifest's quality says so)
                    "--max-spread", "1", "--max-other-cpu", "1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if quiet else None)


def _register_kit(folder: Path, url: str, quiet: bool) -> None:
    """Register the kit with the running daemon through its HTTP API (the daemon keeps its store)."""
    subprocess.run([sys.executable, "-m", "causewatch.cli", "probe", "register", str(folder / "kit"), "--daemon", url],
                   check=True, stdout=subprocess.DEVNULL if quiet else None)


def _tasks(seconds: float) -> int:
    return int(seconds * 20)


NODES = (("demo-node-1", True), ("demo-node-2", False))   # (node, watches the workload)


def _agent(folder: Path, endpoint: str, seconds: float, node: str, watch: bool) -> subprocess.Popen:
    """An agent for `node`; demo-node-1 watches the instrumented master-worker workload, which starts
    once `folder/go` exists, demo-node-2 its node only."""
    cfg = folder / f"{node}.toml"
    cfg.write_text(f'[agent]\ndaemon = "{endpoint}"\nnode = "{node}"\nspool = "{folder / node}-spool"\n'
                   f'ipc = "ipc://{folder / node}.sock"\n')
    cmd = [sys.executable, "-m", "causewatch.cli", "agent", "--config", str(cfg)]
    if watch:
        cmd += ["--", sys.executable, "-c", WAIT_THEN_EXEC, str(folder / "go"),
                sys.executable, "-m", "causewatch.probe.workloads.masterworker", "--app", "demo",
                "--tasks", str(_tasks(seconds)), "--seed", str(SEED), "--workers", "2"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(folder / f"{node}.log", "w"),
                            env=dict(os.environ, CAUSEWATCH_CONFIG=str(cfg)))


def _await_probe(con, node: str, agent: subprocess.Popen, quiet: bool) -> None:
    """Wait until `node`'s probe result is stored (at most PROBE_WAIT s)."""
    from causewatch.daemon import readers
    if not quiet:
        print(f"probing {node} (one node at a time, before the workload starts: a probe sharing the cores "
              "with it or with another probe would rank this machine slower than itself)…", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < PROBE_WAIT and agent.poll() is None:
        if node in {r["node"] for r in readers.probes.latest_probes(con, "demo")}:
            if not quiet:
                print(f"probed in {time.monotonic() - t0:.1f} s", flush=True)
            return
        time.sleep(0.2)
    print(f"{node}'s probe did not come back within {PROBE_WAIT:.0f} s: going on without it", file=sys.stderr)


def prepare(folder: Path) -> None:
    """Make `folder`, or empty it if an earlier demo made it; a folder with anything else is refused."""
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--dir {folder}: is a file; give a folder")
    if folder.exists() and any(folder.iterdir()):
        if not (folder / MARK).exists():
            raise InputError(f"--dir {folder}: not empty and not made by causewatch demo; "
                             "give a new or empty folder (nothing was deleted)")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARK).write_text("made by causewatch demo: a later demo empties this folder\n")


class Hog:
    """CPU contention for the workload: started once the scope has its baseline, stopped after
    HOG_CYCLES model versions learnt under it or HOG_UNTIL of the tasks stored (and always, by `stop`,
    on the way out)."""

    def __init__(self, origin: float, url: str):
        self.url = url                       # the daemon's HTTP API, where an operator pins a baseline
        self.pinned: int | None = None       # the model the demo pinned, if no stable one came in time
        self.procs: list[subprocess.Popen] = []
        self.cpus = sorted(os.sched_getaffinity(0))
        self.origin = origin                 # wall-clock time the workload started
        self.started = self.stopped = None   # seconds after the origin
        self.versions = 0                    # model versions when it started

    def step(self, con, done: float) -> None:
        """Start or stop, `done` being the share of the workload's tasks stored so far."""
        from causewatch.daemon import readers
        models = readers.models.models(con, SCOPE)
        if self.started is None and done >= PIN_AT and models and readers.models.baseline(con, SCOPE) is None:
            self._pin(models[0]["model_id"])
        if self.started is None and done < HOG_UNTIL and readers.models.baseline(con, SCOPE) is not None:
            self.versions = len(models)
            self.procs = [subprocess.Popen([sys.executable, "-c", HOG, str(cpu)]) for cpu in self.cpus]
            self.started = time.time() - self.origin
        elif self.running and (done >= HOG_UNTIL or len(models) - self.versions >= HOG_CYCLES):
            self.stop()

    def _pin(self, model_id: int) -> None:
        """POST /api/baseline, as an operator pins a model they trust (the calm start's newest)."""
        import urllib.parse
        import urllib.request
        query = urllib.parse.urlencode({"scope": SCOPE, "model_id": model_id})
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/api/baseline?{query}", method="POST"), timeout=10)
        self.pinned = model_id

    @property
    def running(self) -> bool:
        return bool(self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        if self.procs:
            self.stopped = time.time() - self.origin
        self.procs = []


def _live(con, bar, hog: Hog) -> dict:
    from causewatch.daemon import readers
    counts = readers.report.live_counts(con)
    if bar is not None:
        state = "on" if hog.running else "done" if hog.stopped else "waiting for the baseline"
        bar.set_postfix_str("  ".join(f"{k} {v:,}" for k, v in counts.items()) + f"  hog {state}", refresh=False)
    return counts


def report(con, seconds: float, folder: Path, hog: Hog) -> dict:
    """What is in the store, from the store: ingest figures, then each analysis' latest output, the
    hog's stretch and each anomaly timed against it, and each scope's newest model drawn as SVG in the
    demo folder (open anomalies in red)."""
    from causewatch.analytics.causal import CausalModel, model_svg
    from causewatch.analytics.causal.anomalies import MIN_BITS
    from causewatch.daemon import readers
    from causewatch.probe.rank import rank_nodes
    rep = readers.report.overview(con)
    rep["store_bytes"] = sum(p.stat().st_size for p in [*folder.glob("causewatch.duckdb*"),
                                                        *folder.glob("causewatch.lake/**/*")] if p.is_file())
    rep["causal_edges"] = [dict(e, stable=e["held_by"] >= STABLE * e["versions"] and e["strength_bits"] >= MIN_BITS)
                           for e in rep["causal_edges"]]
    rep["anomalies"] = [_anomaly(a, hog) for a in reversed(readers.models.anomalies(con))]
    waits = _waits(con, hog)
    rep["contention_hog"] = [{"cpus": hog.cpus, "baseline": f"model {hog.pinned}, pinned by the demo at "
                              f"{PIN_AT:.0%} of the tasks" if hog.pinned else "the first stable model",
                              "started_s": _round(hog.started), "stopped_s": _round(hog.stopped),
                              "model_versions": HOG_CYCLES, **waits, "shown": _shown(rep["anomalies"], waits, hog)}]
    ranking = rank_nodes("demo", readers.probes.latest_probes(con, "demo"), readers.probes.registered_kits(con),
                         time.time())
    rep["probe_ranking"] = [{
        "node": r["node"], "s_per_task": _round(r["task_seconds"]), "lo": _round(r["task_lo"]),
        "hi": _round(r["task_hi"]), "ratio": round(r["ratio"], 3), "age_s": round(r["age_seconds"]),
        "phases": len(r["phases"]), "cpu_bound_phases": sum(bool(p.get("stretched")) for p in r["phases"]),
        "kit": r["quality"]} for r in ranking]
    pictures = []
    for scope in readers.models.model_scopes(con):
        marked = {(a["src"], a["dst"]) for a in readers.models.anomalies(con, scope, open_only=True)}
        path = folder / f"model-{scope.replace(':', '-')}.svg"
        graph = readers.models.model_graph(con, scope)[1]
        path.write_text(model_svg(CausalModel.from_json(graph), marked, title=scope))
        pictures.append({"scope": scope, "svg": str(path)})
    return dict(rep, ingest_values_per_s=rep["sample_values"] / seconds, model_pictures=pictures)


def _waits(con, hog: Hog) -> dict:
    """The contention the tasks met before, during and after the hog: the median of seconds waited
    for a CPU per second of CPU used (cpu_wait_seconds / cpu_seconds)."""
    from causewatch.analytics.causal.features import name_task_columns
    from causewatch.daemon import readers
    df = name_task_columns(*readers.tasks.task_df(con, "demo"))[0]
    if WAIT not in df or hog.started is None:
        return {}
    t = df["t_start"] - hog.origin
    ratio = df[WAIT] / df["cpu_seconds"]
    stretches = {"before": t < hog.started, "during": (t >= hog.started) & (t < (hog.stopped or float("inf"))),
                 "after": t >= (hog.stopped or float("inf"))}
    return {f"wait_per_cpu_s_{name}": _round(ratio[mask].median()) if mask.any() else None
            for name, mask in stretches.items()}


def _shown(anomalies: list[dict], waits: dict, hog: Hog) -> str:
    """In plain words, whether the report shows the hog: an anomaly on the contended resource's variable
    raised while it ran and resolved after it stopped."""
    if hog.stopped is None:
        return "no: the hog did not run its stretch (the model had no baseline in time, or the workload ended)"
    ours = [a for a in anomalies if WAIT in (a["src"], a["dst"]) and hog.started <= a["opened_s"] <= hog.stopped]
    ours.sort(key=lambda a: a["kind"] != "mechanism_changed")   # the wait's own change first
    shown = [a for a in ours if a["resolved_s"] is not None and a["resolved_s"] >= hog.stopped]
    if shown:
        return f"yes: a {shown[0]['kind']} on {WAIT} was raised while the hog ran and resolved after it stopped"
    if ours:
        how = "resolved before it stopped" if all(a["resolved_s"] is not None for a in ours) else "is still open"
        return f"in part: a {ours[0]['kind']} on {WAIT} was raised while the hog ran, but {how}"
    return (f"no anomaly on {WAIT} while the hog ran, though tasks waited {waits.get('wait_per_cpu_s_before')} s "
            f"for a CPU per CPU second before it and {waits.get('wait_per_cpu_s_during')} s during it")


def _anomaly(a: dict, hog: Hog) -> dict:
    """An anomaly with its evidence, opened and resolved in seconds after the workload started and
    said against the hog's stretch."""
    opened = a["opened"] - hog.origin
    resolved = None if a["resolved"] is None else a["resolved"] - hog.origin
    return {"scope": a["scope"], "kind": a["kind"], "src": a["src"], "dst": a["dst"],
            "state": "open" if resolved is None else "resolved", "opened_s": round(opened, 1),
            "resolved_s": _round(resolved), "when": _when(opened, resolved, hog),
            "score": round(a["score"], 3), "threshold": round(a["threshold"], 3),
            "rows": a["evidence"].get("rows")}


def _when(opened: float, resolved: float | None, hog: Hog) -> str:
    if hog.started is None:
        return "the hog never ran"
    said = f"raised {opened - hog.started:+.1f} s from the hog's start"
    if resolved is None:
        return said + ", still open"
    if hog.stopped is None:
        return said + f", resolved {resolved - hog.started:+.1f} s from its start"
    return said + f", resolved {resolved - hog.stopped:+.1f} s from its stop"


def _round(v):
    return None if v is None else round(float(v), 4)


# What each section of the report is, in the words of someone reading it for the first time.
MEANING = {
    "nodes": "the machines whose agents said hello, and which of their counters could be opened (here: "
             "software events only when no hardware PMU is exposed)",
    "phase_vectors": "where programs spent their time, sampled by instruction pointer (native) or Python "
                     "frame (python), per interval: the raw material of phases",
    "top_functions": "the functions those samples landed in most",
    "tasks": "master-worker task records sent by the instrumented workload (instrument.task)",
    "causal_edges": "the newest causal model of the tasks: which variable depends on which, strength in bits; "
                    "held_by of versions: how many of the run's model versions had the edge; stable: held by 80 % "
                    "and at least 0.1 bits (weaker edges sit near the test's threshold and may differ run to run)",
    "causal_submodels": "each variable with parents as the function of them that describes it shortest (MDL)",
    "contention_hog": "mid-run, one busy process per CPU (pinned) competed with the workload for its cores, "
                      "from started_s to stopped_s (seconds after the workload started) while the causal job "
                      "learnt model_versions versions; wait_per_cpu_s: seconds a task waited for a CPU per "
                      "second it ran, before, during and after (other work on the machine contends too)",
    "anomalies": "departures from the baseline model (the first stable one): a mechanism change is a variable "
                 "whose distribution given its causes and the task parameters moved from the baseline's tasks to "
                 "the newest (src (time)); a Markov violation is a new dependency the baseline says should not be "
                 "there; both are judged on each cycle's newest tasks, so they resolve once those are calm "
                 "again (edges that appeared or changed are the model's, whose window keeps the hog's tasks: "
                 "they stay open until it moves); times are seconds from the hog's start and stop",
    "model_pictures": "the newest model of each scope drawn as SVG (edge width = strength, anomalies in red)",
    "bottlenecks": "code regions with fuzzy bottleneck severity (Truong & Fahringer): degree per severity term",
    "probe_ranking": "each node's predicted seconds per task of the app from its software probe (run before "
                     "the workload), with the interval, the ratio to the reference node, the probe's age "
                     "and the kit's quality",
}


def _next_steps(db: Path) -> str:
    return f"""
== next ==
  the demo's daemon has stopped; its store is {db}. Read it with --db, or run a daemon on it and use
  the same verbs live (they read http://127.0.0.1:9464 by default):
    causewatch daemon --db {db} &
    causewatch nodes;  causewatch model --svg model.svg;  causewatch anomalies --all
    causewatch bottlenecks --top 10;  causewatch query "(time_share is high)";  causewatch rank demo
    curl -s localhost:9464/metrics | grep causewatch_"""


def _print(rep: dict, db: Path) -> None:
    print("\n== stored ==")
    print("frames by type: " + ", ".join(f"{k} {v}" for k, v in sorted(rep["frames_by_type"].items())))
    print(f"sample values: {rep['sample_values']:,}  ({rep['ingest_values_per_s']:,.0f} values/s over the run)")
    t = rep["store_tiers"]
    lake = f"{t['cold_bytes_per_value']:.2f} B/value" if t["cold_values"] else "nothing moved yet"
    print(f"store: {t['hot_values']:,} values hot in DuckDB, {t['cold_values']:,} cold in the Parquet lake "
          f"({t['cold_files']} files, {t['cold_bytes']:,} bytes: {lake}); the store's file and lake "
          f"{rep['store_bytes']:,} bytes")
    per_metric = rep["rows_per_metric"]
    print(f"rows per scope/metric ({len(per_metric)} series; the 15 fullest):")
    for metric, n in sorted(per_metric.items(), key=lambda kv: (-kv[1], kv[0]))[:15]:
        print(f"  {metric:<48} {n:>8,}")
    for title, meaning in MEANING.items():
        print(f"\n== {title.replace('_', ' ')} ==\n  ({meaning})")
        print("\n".join("  " + "  ".join(f"{k}={v}" for k, v in r.items()) for r in rep[title]) or "  (none yet)")
    print(_next_steps(db))


def run(args) -> int:
    from tqdm import tqdm

    from causewatch.daemon.server import Daemon
    folder = Path(args.dir).resolve()
    prepare(folder)
    db, quiet = folder / "causewatch.duckdb", args.json or args.quiet
    _build_kit(folder, quiet)
    daemon = Daemon(DaemonConfig(db=str(db), bind="tcp://127.0.0.1:0", http="127.0.0.1:0", **CAUSAL,
                                  **STORE)).start()
    if not quiet:
        print(f"daemon {daemon.endpoint}, DuckDB {db}, metrics http://{daemon.http.address}/metrics")
    _register_kit(folder, f"http://{daemon.http.address}", quiet)
    con = daemon.store.cursor()
    agents = {}
    for node, watch in NODES:   # one at a time: two probes at once would share the cores and disagree
        agents[node] = _agent(folder, daemon.endpoint, args.seconds, node, watch)
        _await_probe(con, node, agents[node], quiet)
    watched = agents["demo-node-1"]
    (folder / "go").touch()
    t0 = time.monotonic()
    bar = None if quiet else tqdm(total=_tasks(args.seconds), desc="workload tasks stored", dynamic_ncols=True,
                                  bar_format="{desc} {bar:20} {n}/{total} {elapsed}{postfix}")
    hog = Hog(time.time(), f"http://{daemon.http.address}")
    try:
        while watched.poll() is None and time.monotonic() - t0 < args.seconds + 120:
            time.sleep(1.0)
            counts = _live(con, bar, hog)
            hog.step(con, counts["tasks"] / _tasks(args.seconds))
            if bar is not None:
                bar.update(min(counts["tasks"], bar.total) - bar.n)
    finally:
        hog.stop()
        if bar is not None:
            bar.close()
        for agent in agents.values():
            if agent.poll() is None:
                agent.terminate()
            agent.wait(60)
    elapsed = time.monotonic() - t0
    daemon.scheduler.stop()
    daemon.scheduler.run_due(float("inf"), {})  # one last analysis cycle over everything stored
    rep = report(con, elapsed, folder, hog)
    daemon.stop()
    print(json.dumps(rep, default=str)) if args.json else _print(rep, db)
    failed = [f"{node} exited {a.returncode}" for node, a in agents.items() if a.returncode not in (0, -15)]
    if failed:
        print(f"agents failed: {', '.join(failed)}; logs in {folder}", file=sys.stderr)
    return 0 if not failed and rep["sample_values"] > 0 else 1

"""The report in words: what each section means to someone reading it for the first time, and the
report printed, section by section, with what to run next."""

from __future__ import annotations

from pathlib import Path

from causewatch.commands.demo import shards
from causewatch.commands.demo.hog import HOG_FACTOR

# What each section of the report is, in the words of someone reading it for the first time.
MEANING = {
    "nodes": "the machines whose agents said hello, and which of their counters could be opened (here: "
             "software events only when no hardware PMU is exposed)",
    "phase_vectors": "where programs spent their time, sampled by instruction pointer (native) or Python "
                     "frame (python), per interval: the raw material of phases",
    "top_functions": "the functions those samples landed in most",
    "phases": "the workload's phases: its tasks' vectors clustered as SimPoint does (causewatch phases), "
              "heaviest first, each with its weight (share of the intervals) and top functions (share of the phase)",
    "tasks": "master-worker task records sent by the instrumented workload (instrument.task)",
    "causal_edges": "the newest causal model of the tasks: which variable depends on which, strength in bits; "
                    "held_by of versions: how many of the run's model versions had the edge; stable: held by 80 % "
                    "and at least 0.1 bits (weaker edges sit near the test's threshold and may differ run to run)",
    "causal_submodels": "each variable with parents as the function of them that describes it shortest (MDL)",
    "contention_hog": "once the model had its baseline (baseline: which model and how it was chosen; "
                      "pinned_model: the one the demo pinned when its calm bound ran out without one, else null; "
                      "baseline_after_s seconds after the workload started), "
                      "per_cpu busy processes pinned to each CPU (calm_wait_per_cpu_s, the calm tasks' wait per CPU "
                      f"second, rounded up, grown once the first tasks under it waited less than {HOG_FACTOR} times "
                      "that: the size the anomaly test needs) competed with the workload for its cores, from "
                      "started_s to stopped_s while the causal job learnt model_versions versions; wait_per_cpu_s: "
                      "seconds a task waited for a CPU per second it ran, before, during and after (other work on "
                      "the machine contends too)",
    "anomalies": "departures from the baseline model (the first stable one): a mechanism change is a variable "
                 "whose distribution given its causes and the task parameters moved from the baseline's tasks to "
                 "the newest (src (time)); a Markov violation is a new dependency the baseline says should not be "
                 "there; both are judged on each cycle's newest tasks, so they resolve once those are calm "
                 "again (edges that appeared or changed are the model's, whose window keeps the hog's tasks: "
                 "they stay open until it moves); times are seconds from the hog's start and stop; under_hog: "
                 "whether the tasks it was raised on ran while the hog did; first_cause and cause: the first of its "
                 "candidate causes as the causal job ranked them (`causes` in its evidence; none beyond the cut: no "
                 "unit changed enough to count), \"the hog\" when that is the hog's processes on demo-node-1; "
                 "related: the variables of the findings raised with it or while it was open, one page for them all",
    "causes": "the story's anomaly's candidate causes, best first, as the causal job ranked them over the units "
              "the daemon knew (the app's task variables and regions, each node's CPU beside the app's, memory, "
              "disk and network, the watched command, the busiest other processes each agent reports): a score "
              "of 1 or more is a unit that changed beyond the cut, higher when it explains the others' changes; "
              "hog: the demo's hog, as the agent watching the workload sees its processes",
    "model_diff": "what changed in the model from the baseline's tasks to those that ran under the hog (causewatch "
                  "diff --scope app:demo with those windows): a model learnt on each, edges added or removed "
                  "(bits before -> after), re-oriented, strengths moved beyond their band, and mechanisms changed, "
                  "each with its fit on its causes in either window; the picture: model-diff.svg",
    "analysis": "where the causal job's learns ran: in the daemon's jobs worker (local), or on the Dask cluster "
                "of analysis_scheduler (--analysis-scheduler tcp://HOST:8786, docs/cluster.md), and how many; "
                "fallbacks: learns run locally because the cluster could not be used; retries: re-runs after a "
                "cluster worker died or the task raised",
    "page": "the alert each anomaly would page an on-call engineer with: deploy/prometheus's rule for its "
            "kind (severity; for_s, the hold before it is sent; sent: whether the anomaly stayed open that "
            "long), the receiver deploy/alertmanager routes it to (amtool, when installed), the labels the "
            "page carries (picture: the model drawn with it in red, from this daemon while it runs)",
    "model_pictures": "the newest model of each scope drawn as SVG (edge width = strength, anomalies in red)",
    "bottlenecks": "code regions with fuzzy bottleneck severity (Truong & Fahringer): degree per severity term",
    "probe_ranking": "each node's predicted seconds per task of the app from its software probe (run before "
                     "the workload), with the interval, the ratio to the reference node, the probe's age "
                     "and the kit's quality",
}


SHARDS_MEANING = ("--shards: daemons as shards, each its own DuckDB file, all moving old samples into one Parquet "
                  "lake; each agent sends to the shard its node name hashes to (rendezvous hashing); any shard "
                  "told its peers answers for all of them, and says which answered (docs/shards.md)")


def next_steps(db: Path) -> str:
    return f"""
== next ==
  the demo's daemon has stopped; its store is {db}. Read it with --db, or run a daemon on it and use
  the same verbs live (they read http://127.0.0.1:9464 by default):
    causewatch daemon --db {db} &
    causewatch nodes;  causewatch model --svg model.svg;  causewatch anomalies --all
    causewatch bottlenecks --top 10;  causewatch query "(time_share is high)";  causewatch rank demo
    causewatch phases --target app:demo --kind python     # every phase, each with its top functions
    curl -s localhost:9464/metrics | grep causewatch_
  past one machine, daemons as shards over one lake, any of them answering for all (docs/shards.md):
    causewatch daemon --shard a --peers b=http://HOST_B:9464 …;  causewatch agent --daemons a=tcp://…,b=tcp://…
    causewatch nodes --daemons http://HOST_A:9464,http://HOST_B:9464    # shards without peers, read as one"""


def print_report(rep: dict, db: Path) -> None:
    """The report as a reader sees it: what was stored, each section with what it means, what to run next."""
    print("\n== stored ==")
    print("frames by type: " + ", ".join(f"{k} {v}" for k, v in sorted(rep["frames_by_type"].items())))
    print(f"sample values: {rep['sample_values']:,}  ({rep['ingest_values_per_s']:,.0f} values/s over the daemon's "
          "run)")
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
    if "shards" in rep:
        print(f"\n== shards ==\n  ({SHARDS_MEANING})")
        print("\n".join(f"  {line}" for line in shards.lines(rep["shards"])))
    print(next_steps(db))
    print(f"\n== story ==\n  {rep['story']['plan']}\n  ran {rep['story']['ran_s']} s of the workload at load "
          f"{rep['story']['load']} (1-minute load average, least and most)")
    _print_brokers(rep["brokers"])


def _print_brokers(told: dict) -> None:
    print("\n== brokers ==\n  (what a scheduler would be told from the probe ranking, as a dry run: Slurm's "
          "weights, lowest first, and the best node's feature for --prefer; each node's HTCondor slot attributes "
          "for a job's Rank; the Kubernetes extender's scores, 0-10. causewatch broker slurm|condor, "
          "POST /api/k8s/prioritize: docs/brokers.md)")
    for line in told["slurm"] or ["(no node ranked yet)"]:
        print(f"  slurm       {line}")
    for node, attrs in told["htcondor"].items():
        shown = "  ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in attrs.items())
        print(f"  htcondor    {node}: {shown or '(nothing: unknown stays absent)'}")
    print("  kubernetes  " + ("  ".join(f"{h['Host']}={h['Score']}" for h in told["kubernetes"]) or "(no node)"))

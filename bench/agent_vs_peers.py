"""The node agent beside its peers: node_exporter and Netdata (Debian's packages), each alone, one window each.

Per tool: metric families (node_exporter's own go_/process_/promhttp_ bookkeeping and build info left
out), families under node_exporter's names that node_exporter also has here, values per second, CPU
seconds of the tool's process tree (/proc, ended threads included) per wall second and per exported value,
RSS of the tree, and the 1-minute load average at the window's end. node_exporter is scraped at 1 Hz;
Netdata collects at its defaults (mostly 1 s) and is asked for its Prometheus export once at the end;
causewatch's agent runs node-only at 1 Hz (counters and psutil 1 s, no IP sampling) against a daemon
whose own CPU is not counted (Prometheus' is not counted for node_exporter either), values per second
being what the daemon stored. A peer whose package is missing is skipped, saying so.
Usage: python bench/agent_vs_peers.py [--seconds 60] [--tools agent,node_exporter,netdata] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil
from agent_overhead import agent_config, free_port
from cputime import tree_cpu_seconds
from prometheus_client.parser import text_string_to_metric_families
from startup import start_agent

TOOLS = {"node_exporter": "node_exporter", "netdata": "netdata", "agent": "causewatch agent"}   # --tools -> row
BOOKKEEPING = ("go_", "process_", "promhttp_", "node_exporter_build_info")


def get(url: str, timeout: float = 10) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


def wait_get(url: str, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (text := get(url)) is not None:
            return text
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {seconds:.0f} s")


def families(text: str, keep=lambda name: True) -> dict[str, int]:
    """family name (counters with _total, as on their TYPE line) -> samples, of the families `keep` keeps."""
    out = {}
    for f in text_string_to_metric_families(text):
        name = f.name + "_total" if f.type == "counter" else f.name
        if keep(name) and not name.startswith(BOOKKEEPING):
            out[name] = len(f.samples)
    return out


def tree_rss(pid: int) -> float:
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return sum(p.memory_info().rss for p in procs if p.is_running()) / 2**20


def window(pid: int, seconds: float, tick=None) -> dict:
    """CPU per wall second of `pid`'s tree over `seconds`, calling `tick()` each second."""
    c0, t0 = tree_cpu_seconds(pid), time.monotonic()
    for i in range(int(seconds)):
        if tick:
            tick()
        time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
    wall = time.monotonic() - t0
    return {"cpu_per_s": (tree_cpu_seconds(pid) - c0) / wall, "rss_mb": tree_rss(pid), "load1": os.getloadavg()[0],
            "wall": wall}


def node_exporter(seconds: float) -> dict | None:
    exe = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if exe is None:
        return None
    url = f"http://127.0.0.1:{free_port()}/metrics"
    p = subprocess.Popen([exe, f"--web.listen-address={url[7:-8]}"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_get(url)
        time.sleep(2)
        scrapes = []
        out = window(p.pid, seconds, tick=lambda: scrapes.append(get(url)))
        fams = families(scrapes[-1])
        return {**out, "families": fams, "values_per_s": sum(fams.values()) * len(scrapes) / out["wall"]}
    finally:
        p.terminate()
        p.wait(10)


def netdata(seconds: float, folder: str) -> dict | None:
    exe = shutil.which("netdata") or ("/usr/sbin/netdata" if os.path.exists("/usr/sbin/netdata") else None)
    if exe is None:
        return None
    base = f"http://127.0.0.1:{free_port()}"
    p = subprocess.Popen([exe, "-D", "-p", base.rsplit(":", 1)[1]], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd=folder)
    try:
        wait_get(f"{base}/api/v1/info")
        time.sleep(15)                              # plugins started, charts made
        out = window(p.pid, seconds)
        charts = json.loads(get(f"{base}/api/v1/charts"))["charts"].values()
        fams = families(get(f"{base}/api/v1/allmetrics?format=prometheus&types=yes", timeout=30))
        return {**out, "families": fams, "values_per_s": sum(len(c["dimensions"]) / c["update_every"] for c in charts)}
    finally:
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()


def agent(seconds: float, folder: str) -> dict:
    daemon, endpoint = start_daemon_with_http(folder)
    try:
        http = daemon.http
        config = agent_config(folder, endpoint, "peers", counters_interval=1.0, psutil_interval=1.0, bbv_frequency=0)
        a, _ = start_agent(sys.executable, ["--config", config, "--flush-timeout", "5"], folder,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(12)                          # past start-up and the first slow collectors' frames
            before = stored(http)
            out = window(a.pid, seconds)
            values = (stored(http) - before) / out["wall"]
            fams = families(get(f"{http}/metrics"), keep=lambda n: not n.startswith(DAEMON_OWN))
            return {**out, "families": fams, "values_per_s": values}
        finally:
            a.terminate()
            a.wait(30)
    finally:
        daemon.terminate()
        daemon.wait(30)


# the daemon's own series (ingest, jobs), not the agent's
DAEMON_OWN = ("causewatch_frames_", "causewatch_sample_values", "causewatch_store_", "causewatch_job_",
              "causewatch_commit_", "causewatch_agents_", "causewatch_credit_", "causewatch_node_frames",
              "causewatch_agent_last_seen", "python_", "causewatch_http")


def stored(http: str) -> float:
    for f in text_string_to_metric_families(get(f"{http}/metrics")):
        if f.name == "causewatch_sample_values_stored":
            return sum(s.value for s in f.samples if s.name.endswith("_total"))
    raise SystemExit("the daemon's /metrics has no causewatch_sample_values_stored")


def start_daemon_with_http(folder: str):
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    p = subprocess.Popen([sys.executable, "-m", "causewatch.cli", "daemon", "--db", f"{folder}/peers.duckdb",
                          "--bind", endpoint, "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    p.http = f"http://127.0.0.1:{port}"
    wait_get(f"{p.http}/metrics")
    return p, endpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="measuring window per tool")
    ap.add_argument("--tools", default=",".join(TOOLS), help="which tools, comma-separated (default: all three)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if not tools or set(tools) - set(TOOLS):
        ap.error(f"--tools: expected some of {', '.join(TOOLS)}, got {args.tools!r}")
    with tempfile.TemporaryDirectory(prefix="cw-peers-") as folder:
        run = {"node_exporter": lambda: node_exporter(args.seconds), "netdata": lambda: netdata(args.seconds, folder),
               "agent": lambda: agent(args.seconds, folder)}
        results = {TOOLS[t]: run[t]() for t in TOOLS if t in tools}
    ne = set((results.get("node_exporter") or {}).get("families", {}))
    rows = {}
    for tool, r in results.items():
        if r is None:
            print(f"{tool}: skipped, its package is not installed (apt-get install -y "
                  f"{'prometheus-node-exporter' if tool == 'node_exporter' else tool})")
            continue
        shared = len(set(r["families"]) & ne) if ne else None
        rows[tool] = {"families": len(r["families"]), "node_exporter_names": shared,
                      "values_per_s": r["values_per_s"], "cpu_percent": 100 * r["cpu_per_s"],
                      "cpu_us_per_value": 1e6 * r["cpu_per_s"] / r["values_per_s"] if r["values_per_s"] else None,
                      "rss_mb": r["rss_mb"], "load1": r["load1"]}
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{args.seconds:.0f} s per tool, {os.cpu_count()} CPUs")
    print(f"{'tool':18s} {'families':>8s} {'NE names':>8s} {'values/s':>9s} {'CPU %':>7s} {'µs/value':>9s} "
          f"{'RSS MB':>7s} {'load1':>6s}")
    for tool, r in rows.items():
        shared = "n/a" if r["node_exporter_names"] is None else str(r["node_exporter_names"])
        per = "n/a" if r["cpu_us_per_value"] is None else f"{r['cpu_us_per_value']:.2f}"
        print(f"{tool:18s} {r['families']:8d} {shared:>8s} {r['values_per_s']:9.0f} {r['cpu_percent']:7.3f} "
              f"{per:>9s} {r['rss_mb']:7.1f} {r['load1']:6.2f}")


if __name__ == "__main__":
    main()

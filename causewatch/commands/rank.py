"""`causewatch rank APP`: nodes ordered by the task time their latest probe predicts for APP.

Reads a stopped daemon's DuckDB file (--db) or asks a running daemon's HTTP API (/api/rank).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from causewatch.errors import InputError

EPILOG = """examples:
  causewatch rank mw                              # ask the daemon at 127.0.0.1:9464
  causewatch rank mw --http 10.0.0.5:9464 --json
  causewatch rank mw --db causewatch.duckdb       # the daemon must be stopped (one DuckDB writer)
"""


def add_arguments(parser) -> None:
    parser.add_argument("app", help="application name (as in its probe kit)")
    parser.add_argument("--db", help="read this DuckDB store instead of asking the daemon")
    parser.add_argument("--http", default="127.0.0.1:9464", help="daemon HTTP address (default 127.0.0.1:9464)")
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")


def _from_db(db: str, app: str) -> list[dict]:
    from causewatch.daemon import tables
    from causewatch.probe.rank import rank_nodes
    con = tables.open_store(db, need=("probe_results",))
    try:
        return rank_nodes(app, tables.latest_probes(con, app))
    finally:
        con.close()


def _from_http(address: str, app: str) -> list[dict]:
    url = f"http://{address}/api/rank?{urllib.parse.urlencode({'app': app})}"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return json.load(reply)["nodes"]
    except urllib.error.HTTPError as e:
        raise InputError(f"{url}: HTTP {e.code} {e.read().decode(errors='replace')[:200]}") from None
    except (urllib.error.URLError, OSError) as e:
        raise InputError(f"{url}: cannot reach the daemon ({e}); give --db FILE for a stopped daemon") from None


def run(args) -> int:
    nodes = _from_db(args.db, args.app) if args.db else _from_http(args.http, args.app)
    if args.json:
        print(json.dumps({"app": args.app, "nodes": nodes}, indent=2))
        return 0
    if not nodes:
        print(f"no probe results for {args.app!r} yet")
        return 0
    print(f"{'rank':>4} {'node':<24} {'predicted s':>12} {'interval':>21} {'ratio':>7}")
    for n in nodes:
        print(f"{n['rank']:>4} {n['node']:<24} {n['predicted_seconds']:>12.2f} "
              f"{'[' + format(n['lo'], '.2f') + ', ' + format(n['hi'], '.2f') + ']':>21} {n['ratio']:>7.3f}")
    return 0

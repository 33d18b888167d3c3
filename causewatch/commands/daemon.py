"""`causewatch daemon`: run the ingest daemon on a DuckDB file."""

import errno
import os
from pathlib import Path

from causewatch import config
from causewatch.config import DaemonConfig
from causewatch.errors import ConfigError

EPILOG = """examples:
  causewatch daemon --db /var/lib/causewatch/cw.duckdb
  causewatch daemon --config /etc/causewatch/daemon.toml
  causewatch daemon --bind tcp://0.0.0.0:5555 --keys /etc/causewatch/keys   # CURVE, allow-list
  causewatch keys /etc/causewatch/keys --name server                          # make the server pair
  causewatch daemon --analysis-scheduler tcp://scheduler:8786   # causal learns on a Dask cluster
  causewatch daemon --jobs-here   # debug: the jobs on the daemon's scheduler thread, no jobs worker
  causewatch daemon --http 0.0.0.0:9464 --web-config-file /etc/causewatch/web.yml   # HTTPS, basic auth
  causewatch daemon --shard a --peers b=http://10.0.0.6:9464,c=http://10.0.0.7:9464 --http 10.0.0.5:9464
"""


def add_arguments(p):
    p.add_argument("--config", help="TOML file (table [daemon] or top level)")
    p.add_argument("--db", help="DuckDB file (default causewatch.duckdb)")
    p.add_argument("--bind", help="ZeroMQ endpoint to bind (default tcp://127.0.0.1:5555)")
    p.add_argument("--keys", help="folder with server.key_secret and authorized/ agent public keys (CURVE)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow a non-loopback bind without CURVE keys")
    p.add_argument("--http", help="host:port for /metrics and /api ('' to turn off; default 127.0.0.1:9464)")
    p.add_argument("--web-config-file", metavar="FILE",
                   help="TLS and basic authentication for --http: exporter-toolkit's web.yml, as node_exporter's "
                        "--web.config.file (reread on SIGHUP; docs/architecture.md, \"HTTP API\")")
    p.add_argument("--analysis-scheduler", metavar="tcp://HOST:PORT",
                   help="a dask.distributed scheduler to run the causal learns on (default '': the daemon's own "
                        "jobs worker; docs/cluster.md)")
    p.add_argument("--jobs-here", action="store_true", default=None,
                   help="debug: run the analysis jobs in the daemon's own process, on its scheduler thread, not in "
                        "the jobs worker, so a debugger steps from the scheduler to the anomaly row "
                        "(docs/architecture.md, \"Two walks\")")
    p.add_argument("--shard", help="this daemon's shard name on a sharded site (docs/shards.md)")
    p.add_argument("--peers", metavar="NAME=URL,...", help="the other shards' HTTP APIs: /api/ answers for all")


def load_config(args) -> DaemonConfig:
    return config.load(DaemonConfig, args.config, "daemon", db=args.db, bind=args.bind, keys=args.keys,
                       insecure=args.insecure, http=args.http, web_config_file=args.web_config_file, shard=args.shard,
                       peers=args.peers and [p.strip() for p in args.peers.split(",") if p.strip()],
                       analysis_scheduler=args.analysis_scheduler, jobs_here=args.jobs_here)


def run(args) -> int:
    import zmq

    from causewatch.daemon.server import Daemon  # duckdb, zmq: only when serving (the analytics load in its workers)
    cfg = load_config(args)
    secret = Path(cfg.keys or ".") / "server.key_secret"
    if cfg.keys and secret.exists() and not os.access(secret, os.R_OK):
        raise ConfigError("keys", f"{secret} is not readable by this user: fix its owner or mode (0600)")
    try:
        daemon = Daemon(cfg)          # opens the store and the HTTP port
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ConfigError("http", f"{cfg.http} is in use (another daemon?): stop it, or choose another "
                                      "--http ('' turns HTTP off)", "--http") from None
        raise
    try:
        daemon.serve()                # binds the ZeroMQ endpoint
    except zmq.ZMQError as e:
        daemon.store.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError("bind", f"{cfg.bind} is in use (another daemon?): stop it, or choose another "
                                      "--bind", "--bind") from None
        raise
    return 0

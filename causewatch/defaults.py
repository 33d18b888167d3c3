"""What a data verb names before it reads anything (its `--help`, where it looks for a daemon or a
store), in a module that imports nothing: config.py's DaemonConfig and http_client.py take these from
here, where importing either would load TOML or YAML reading, dataclasses and the shards' hashing for
three strings."""

DB = "causewatch.duckdb"                     # the daemon's store file
HTTP = "127.0.0.1:9464"                      # the daemon's /metrics and /api/*
HTTP_CONFIG_ENV = "CAUSEWATCH_HTTP_CONFIG"   # the CLI's client configuration for a daemon (http_client.py)

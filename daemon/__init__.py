"""causewatch.daemon: ingest (ROUTER), DuckDB store, analysis scheduler, Prometheus exporter, HTTP API."""

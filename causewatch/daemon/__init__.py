"""causewatch.daemon: ingest (ROUTER), the DuckDB store and its readers, the job scheduler and its
worker processes, the Prometheus exporter and the HTTP API (docs/architecture.md maps them)."""

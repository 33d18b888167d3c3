"""Phased master-worker workloads for tests, benchmarks and the demo."""

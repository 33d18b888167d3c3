"""causewatch: runtime performance monitoring for clusters and grids.

Agents stream counters and phase vectors to a daemon that stores them in DuckDB and learns from them.
"""

__version__ = "0.1.0"

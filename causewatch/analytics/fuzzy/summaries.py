"""The region-summary DataFrame shared by PERFQL, the bottleneck search and their readers: its key
columns, its base metrics, and the one rule that turns a counter key into a metric (column) name."""

from __future__ import annotations

import math
import re

import pandas as pd

KEYS = ["node", "app", "region", "source"]
BASE_METRICS = ["duration", "calls", "cpu_seconds", "samples", "time_share"]


def metric_name(key: str) -> str:
    """A counter key as a metric (column) name: anything but letters, digits and _ becomes _."""
    return re.sub(r"\W", "_", key)


def records(df: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts (NaN becomes null)."""
    rows = df.to_dict(orient="records")
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]

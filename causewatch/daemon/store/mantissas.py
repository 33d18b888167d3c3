"""The lake's values as decimal mantissas (daemon/store/lake.py's newest layout): a value with at most
MAX_SCALE digits after the point is written as the integer `round(value * 10^scale)`, `scale` being the
most digits any value of its series in the file needs, and read back as `mantissa / 10^scale`; every
other value (not such a decimal, too large, NaN, infinite, -0.0) stays a DOUBLE in `value`.

The writer keeps a mantissa only where the reader's very arithmetic gives the value back, the same
double bit for bit (a DOUBLE equality that is exact but for NaN and the signed zeros, both kept out):
so a read is exact whatever the values. Parquet v2 writes the integers delta-packed, and a series'
neighbouring values differ by few units where their doubles' bytes differ almost everywhere.
"""

from __future__ import annotations

MAX_SCALE = 9        # the decimals a mantissa may stand for (psutil's and the agents' rounded figures)
COLUMNS = "node, scope, metric, series_id, ts, value, mantissa, scale"   # a file's columns, in order
# What a BIGINT holds: a product as large as this stays a DOUBLE (no cast overflows).
_BIGINT = 9.2e18


def power(scale: str) -> str:
    """10 to the `scale` (a column or expression, 0..MAX_SCALE) as a DOUBLE: literals, exact."""
    return "CASE " + scale + " " + " ".join(f"WHEN {s} THEN 1e{s}" for s in range(MAX_SCALE + 1)) + " END"


# A value in this layout's columns: its DOUBLE, or its mantissa read back.
VALUE = f"coalesce(value, mantissa / {power('scale')})"


def _fits(value: str, p: str) -> str:
    """Whether `value` comes back from its mantissa at 10^scale `p`, bit for bit."""
    return (f"(isfinite({value}) AND NOT ({value} = 0 AND signbit({value})) AND abs({value} * {p}) < {_BIGINT} "
            f"AND round({value} * {p}) / {p} = {value})")


def digits(value: str) -> str:
    """The fewest decimals 0..MAX_SCALE whose mantissa gives `value` back; NULL when none does."""
    return "CASE " + " ".join(f"WHEN {_fits(value, f'1e{s}')} THEN {s}" for s in range(MAX_SCALE + 1)) + " END"


def scales(rows: str) -> str:
    """The SQL of each series' scale in `rows` (series_id, value, ...): the most digits its values need
    (NULL: none is such a decimal)."""
    return f"SELECT series_id, max({digits('value')})::UTINYINT AS scale FROM ({rows}) GROUP BY series_id"


def encoded(rows: str) -> str:
    """`rows` (SQL of node, scope, metric, series_id, ts, value and the series' `scale`) in COLUMNS."""
    p = power("scale")
    mantissa = f"CASE WHEN {_fits('value', p)} THEN TRY_CAST(round(value * {p}) AS BIGINT) END"
    return f"""SELECT node, scope, metric, series_id, ts, CASE WHEN mantissa IS NULL THEN value END AS value,
            mantissa, scale FROM (SELECT *, {mantissa} AS mantissa FROM ({rows}))"""

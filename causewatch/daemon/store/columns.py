"""Arrow columns made from their buffers, for the writes of the ingesting process.

`pa.array` and `pa.table` over Python or NumPy values load pandas the first time they run (pyarrow's
pandas shim imports it to ask whether a value is a Series), and the ingesting daemon process loads no
pandas (docs/architecture.md): its first commit used to pull it in. `Array.from_buffers` and
`Table.from_arrays` never ask, so every column the writer hands DuckDB is made here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa

_TYPES = {np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64()}
# DuckDB column types of the tables the writer fills row by row, and how their Python values become a column
_DUCKDB = {"INTEGER": np.int32, "BIGINT": np.int64, "DOUBLE": np.float64}


def _validity(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def numbers(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A NumPy int32, int64 or float64 array as an Arrow column without a copy; `valid` (bool, or None
    for all) marks the non-null values."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(_TYPES[values.dtype], len(values), [_validity(valid), pa.py_buffer(values)])


def optional(values: list, dtype) -> pa.Array:
    """Python numbers or None; a number the type cannot hold raises OverflowError."""
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    return numbers(np.array([0 if v is None else v for v in values], dtype), valid)


def texts(values: list[str | None]) -> pa.Array:
    """Python strings or None (64-bit offsets: a batch's text may pass 2 GiB)."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    valid = np.fromiter((v is not None for v in values), bool, len(values))
    return pa.Array.from_buffers(pa.large_string(), len(values),
                                 [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])


def column(duckdb_type: str, values: list) -> pa.Array:
    """Python values for a column of this DuckDB type (VARCHAR and JSON as text)."""
    if duckdb_type in ("VARCHAR", "JSON"):
        return texts(values)
    if duckdb_type in _DUCKDB:
        return optional(values, _DUCKDB[duckdb_type])
    raise TypeError(f"no Arrow column made for DuckDB type {duckdb_type}")


def table(columns: dict[str, pa.Array]) -> pa.Table:
    return pa.Table.from_arrays(list(columns.values()), names=list(columns))


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, data) -> Iterator[duckdb.DuckDBPyConnection]:
    """`data` (an Arrow table or reader, no copy) readable by the block's SQL as `name`: named here, not
    found among the caller's locals, where a rename would break the SQL only when it runs."""
    con.register(name, data)
    try:
        yield con
    except BaseException:
        # an aborted transaction refuses unregister; its rollback drops the registration itself
        with contextlib.suppress(duckdb.Error):
            con.unregister(name)
        raise
    con.unregister(name)

"""SimPoint 3.2's file formats: frequency-vector (.bb, .bb.gz) input, and labels, simpoints, weights;
the function of each block from valgrind exp-bbv's pc file.

Numpy only (no scipy): `causewatch phases FILE` starts in the time SimPoint takes to run.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np


class PhaseError(ValueError):
    """Bad input to phase analysis: a malformed vector file, an empty matrix, a bad parameter."""


class CountRows(NamedTuple):
    """An (intervals x blocks) counts matrix as CSR parts: row i's counts are
    data[indptr[i]:indptr[i+1]] in columns indices[...] (block id b -> column b-1)."""
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]

    def tocsr(self):
        import scipy.sparse as sp  # only callers that want scipy pay for its import
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)

    def toarray(self) -> np.ndarray:
        out = np.zeros(self.shape)
        np.add.at(out, (row_of_entries(self.indptr), self.indices), self.data)   # a block listed twice adds up
        return out


def row_of_entries(indptr) -> np.ndarray:
    """The row of each stored entry of a CSR matrix."""
    return np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))


def count_rows(X) -> CountRows:
    """CSR parts of a counts matrix given dense, as a scipy sparse matrix, or as CountRows."""
    if isinstance(X, CountRows):
        return X
    if hasattr(X, "tocsr"):
        X = X.tocsr()
        X.sum_duplicates()
        return CountRows(X.indptr, X.indices, np.asarray(X.data, float), X.shape)
    X = np.asarray(X, float)
    if X.ndim != 2:
        raise PhaseError(f"counts must be a 2-d matrix, got shape {X.shape}")
    rows, cols = np.nonzero(X)
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=len(X)))))
    return CountRows(indptr, cols, X[rows, cols], X.shape)


# ---- reading .bb ----------------------------------------------------------------------------------

_DIGIT_LIMIT = 15   # up to 15 digits a count stays exact in a float64


def read_frequency_vectors(path) -> CountRows:
    """Parse a SimPoint .bb file (gzipped when the name ends in .gz) into one counts matrix."""
    chunks = list(iter_frequency_vectors(path))
    offsets = np.cumsum([0] + [c.indptr[-1] for c in chunks])
    indptr = np.concatenate([[0]] + [c.indptr[1:] + off for c, off in zip(chunks, offsets)])
    return CountRows(indptr, np.concatenate([c.indices for c in chunks]), np.concatenate([c.data for c in chunks]),
                     (len(indptr) - 1, max(c.shape[1] for c in chunks)))


def iter_frequency_vectors(path, chunk_bytes: int = 1 << 18):
    """The intervals of a SimPoint .bb file (gzipped when the name ends in .gz) as CountRows of
    successive whole lines, about `chunk_bytes` of text each, so a big file is never held whole.

    Lines that do not start with 'T' (comments, valgrind's '# Thread' trailers, blanks) are skipped.
    Integer text (what valgrind's exp-bbv and SimPoint's tools write) is parsed with array operations;
    anything else (fractional counts, or an error to report with its line) token by token.
    """
    seen, lines = 0, 0
    try:
        with _open(path) as f:
            tail = b""
            while True:
                block = f.read(chunk_bytes)
                text = tail + block
                cut = len(text) if not block else text.rfind(b"\n") + 1
                text, tail = text[:cut], text[cut:]
                if text:
                    rows = _parse_integer_lines(text)
                    if rows is None:
                        rows = _parse_tokens(path, text, lines)
                    lines += text.count(b"\n")
                    if rows.shape[0]:
                        seen += rows.shape[0]
                        yield rows
                if not block:
                    break
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise PhaseError(f"{path}: not a readable gzip file ({e})") from None
    if not seen:
        raise PhaseError(f"{path}: no frequency vectors (expected lines 'T:id:count :id:count ...')")


def _open(path):
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def _parse_integer_lines(raw: bytes) -> CountRows | None:
    """The 'T' lines among whole lines of all-integer .bb text, or None when the text is anything
    else (the token parser then decides)."""
    b = np.frombuffer(raw, np.uint8)
    line_starts = np.concatenate(([0], np.flatnonzero(b == 10) + 1))
    line_starts = line_starts[line_starts < len(b)]
    keep = b[line_starts] == ord("T")
    if not keep.any():
        return CountRows(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), (0, 1))
    line_ends = np.append(line_starts[1:], len(b))
    lengths = (line_ends - line_starts)[keep]
    t = b[np.repeat(keep, line_ends - line_starts)]     # the kept lines, each ending in its newline
    t_starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    digit = (t - 48).astype(np.uint8) < 10
    colon = t == ord(":")
    space = (t == 32) | (t == 9) | (t == 10) | (t == 13)
    first = np.zeros(len(t), bool)
    first[t_starts] = True
    if not (digit | colon | space | first).all():
        return None
    edge = np.diff(digit.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    bounds = np.flatnonzero(edge)
    run_start, run_end = bounds[0::2], bounds[1::2]
    run_len = run_end - run_start
    if len(run_start) and run_len.max() > _DIGIT_LIMIT:
        return None
    # a run of digits is a number when a colon sits right before it; ':id:count' alternate in a line
    if not colon[run_start - 1].all():
        return None
    per_line = np.bincount(np.searchsorted(t_starts, run_start, "right") - 1, minlength=len(lengths))
    if (per_line % 2).any() or per_line.sum() != colon.sum():
        return None
    # lines hold an even number of numbers, so ids and counts alternate through the whole chunk
    id_start, id_end, count_start = run_start[0::2], run_end[0::2], run_start[1::2]
    # an id's colon follows a space or the line's 'T'; a count's colon follows its id's last digit
    if not (space[id_start - 2] | first[id_start - 2]).all() or not (count_start - 2 == id_end - 1).all():
        return None
    padded = np.concatenate([t, np.zeros(_DIGIT_LIMIT, np.uint8)])
    values = np.zeros(len(run_start), np.int64)
    for offset in range(int(run_len.max()) if len(run_len) else 0):
        values = np.where(run_len > offset, values * 10 + (padded[run_start + offset].astype(np.int64) - 48), values)
    ids = values[0::2]
    if (ids < 1).any():
        return None
    indptr = np.concatenate(([0], np.cumsum(per_line // 2)))
    return CountRows(indptr, ids - 1, values[1::2].astype(float), (len(lengths), int(ids.max()) if len(ids) else 1))


def _parse_tokens(path, raw: bytes, first_line: int = 0) -> CountRows:
    """Token-by-token parse of whole lines (the first is line `first_line` + 1 of the file):
    fractional counts, and the line and token of the first error."""
    indptr, cols, vals = [0], [], []
    for lineno, line in enumerate(raw.decode("utf-8", "replace").split("\n"), first_line + 1):
        if not line.startswith("T"):
            continue
        for token in line[1:].split():
            parts = token.split(":")
            if len(parts) != 3 or parts[0]:
                raise PhaseError(f"{path}:{lineno}: token {token!r} is not ':id:count'")
            try:
                block, count = int(parts[1]), float(parts[2])
            except ValueError:
                raise PhaseError(f"{path}:{lineno}: token {token!r} has a non-numeric id or count") from None
            if block < 1 or not count >= 0 or count == float("inf"):
                raise PhaseError(f"{path}:{lineno}: token {token!r}: ids start at 1 and counts are finite and >= 0")
            cols.append(block - 1)
            vals.append(count)
        indptr.append(len(cols))
    width = max(cols) + 1 if cols else 1
    return CountRows(np.array(indptr), np.array(cols, np.int64), np.array(vals, float), (len(indptr) - 1, width))


# ---- writing and reading SimPoint's outputs ------------------------------------------------------

def write_frequency_vectors(path, X) -> None:
    """Write a counts matrix (dense, sparse or CountRows) as a SimPoint .bb file; zeros are left out."""
    rows = count_rows(X)
    with open(path, "w") as f:
        for r in range(rows.shape[0]):
            lo, hi = rows.indptr[r], rows.indptr[r + 1]
            tokens = "".join(f":{c + 1}:{_num(v)} " for c, v in zip(rows.indices[lo:hi], rows.data[lo:hi]) if v)
            f.write(f"T{tokens}\n")


def _num(v) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def write_simpoints(path, simpoints) -> None:
    """`<interval> <phase>` per non-empty phase (simpoints[p] == -1 marks an empty one)."""
    Path(path).write_text("".join(f"{i} {p}\n" for p, i in enumerate(simpoints) if i >= 0))


def write_weights(path, weights) -> None:
    """`<weight> <phase>` per non-empty phase, weights renormalised over the non-empty phases."""
    weights = np.asarray(weights, float)
    total = weights[weights > 0].sum()
    Path(path).write_text("".join(f"{float(w / total)!r} {p}\n" for p, w in enumerate(weights) if w > 0))


def write_labels(path, labels, distances) -> None:
    """`<phase> <distance to its centre>` per interval, in interval order."""
    Path(path).write_text("".join(f"{int(label)} {float(d)!r}\n" for label, d in zip(labels, distances)))


def _read_pairs(path, first, second):
    rows = []
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            rows.append((first(parts[0]), second(parts[1])))
        except (ValueError, IndexError):
            raise PhaseError(f"{path}:{lineno}: expected two fields, got {line!r}") from None
    return rows


def read_simpoints(path) -> dict[int, int]:
    """{phase: interval} from a .simpoints file."""
    return {p: i for i, p in _read_pairs(path, int, int)}


def read_weights(path) -> dict[int, float]:
    """{phase: weight} from a .weights file."""
    return {p: w for w, p in _read_pairs(path, float, int)}


def read_pc_functions(path) -> dict[int, str]:
    """{column: function name} from an exp-bbv pc file ('F:<block id>:<address>:<function>' lines; the
    other lines name the function's blocks' addresses); block id b is column b - 1, as in the .bb."""
    functions = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        fields = line.split(":", 3)
        if fields[0] == "F":
            if len(fields) != 4 or not fields[1].isdigit() or int(fields[1]) < 1:
                raise PhaseError(f"{path}:{number}: expected 'F:<block id>:<address>:<function>', got {line!r}")
            functions[int(fields[1]) - 1] = fields[3]
    return functions


def read_labels(path) -> tuple[np.ndarray, np.ndarray]:
    """(labels, distances) from a labels file."""
    rows = _read_pairs(path, int, float)
    return np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows])

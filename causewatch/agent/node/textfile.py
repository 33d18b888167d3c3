"""node_exporter's textfile collector: the `*.prom` files of `textfile_directory`, in the Prometheus text
format, sent as node series under their own names (wire.TEXTFILE before each, which the daemon strips).

A file that cannot be read or parsed, that gives a sample a timestamp, that has more than MAX_SERIES
series or MAX_BYTES bytes, that would take the collector past MAX_TOTAL series, or whose families clash
with an earlier file's (another TYPE or HELP, a series again) is left out whole: node_textfile_scrape_error
is 1 and the state names the file and why.
The parser is the agent's own, strict: prometheus_client is a daemon dependency, and an agent-only
install has only the core's (docs/architecture.md).
"""

from __future__ import annotations

import logging
import os
import re
import stat

from causewatch import wire
from causewatch.agent.node.files import name

log = logging.getLogger(__name__)
MAX_BYTES = 1 << 20    # a file's size
MAX_SERIES = 1000      # a file's series; a file with more is left out whole
MAX_TOTAL = 10_000     # the collector's series; a file that would take it past is left out whole
MAX_REASON = 200       # characters of why a file is left out (a reason may quote a line of the file)
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
_RESERVED = ("causewatch_", "node_textfile_")   # the daemon's own families and this collector's
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"({_NAME})(?:\{{(.*)\}})?[ \t]+(\S+)([ \t]+\S+)?[ \t]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,|$)')
_VALUE = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf)|NaN")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class Textfile:
    name = "textfile"

    def __init__(self, directory: str):
        self.directory = directory
        # the last run's: file (or "directory") -> why it was left out; hello's keys must be printable names
        self.errors: dict[str, str] = {}

    def collect(self) -> dict[str, float]:
        errors, out, families = {}, {}, {}
        try:
            files = sorted(f for f in os.listdir(self.directory) if f.endswith(".prom"))
        except OSError as e:
            errors["directory"], files = f"cannot list {self.directory}: {e.strerror}"[:MAX_REASON], []
        for file in files:
            try:
                series, mtime = _read(os.path.join(self.directory, file), families, out)
            except (OSError, ValueError) as e:
                errors[_shown(file)] = str(e)[:MAX_REASON]
                continue
            out.update(series)
            out[name("node_textfile_mtime_seconds", ("file", file))] = mtime
        out["node_textfile_scrape_error"] = float(bool(errors))
        for file, why in errors.items():
            if self.errors.get(file) != why:
                log.warning("textfile %s left out: %s", file, why)
        self.errors = errors
        return out

    def field_states(self) -> dict[str, str]:
        return dict(self.errors)


def _shown(file: str) -> str:
    """A file's name as hello can carry it: printable, within wire.MAX_NAME."""
    return (file if file.isprintable() else ascii(file))[:wire.MAX_NAME]


def _read(path: str, families: dict, taken: dict) -> tuple[dict[str, float], float]:
    """(series, mtime) of one file; `families` ({name: (type, help)} of the files before) gains its own."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)   # a FIFO must not hang the run
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = b""
        while len(data) <= MAX_BYTES and (chunk := os.read(fd, 65536)):
            data += chunk
        mtime = float(int(os.fstat(fd).st_mtime))
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ValueError(f"over {MAX_BYTES} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text (byte {e.start})") from None
    own, series = parse(text)
    for family, (kind, help) in own.items():
        before, before_help = families.get(family, (kind, help))
        if before != kind or (help and before_help and help != before_help):
            raise ValueError(f"{family}: TYPE or HELP unlike an earlier file's ({before}, {before_help!r})")
    if len(taken) + len(series) > MAX_TOTAL:
        raise ValueError(f"its {len(series)} series would take the collector past {MAX_TOTAL}")
    again = next((s for s in series if s in taken), None)
    if again is not None:
        raise ValueError(f"series {again} again (an earlier file has it)")
    families.update(own)
    return series, mtime


def parse(text: str) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    """({family: (type, help)}, {wire name: value}) of a text-format exposition; a fault raises ValueError
    naming its line."""
    types, helps, seen, series = {}, {}, set(), {}
    for number, line in enumerate(text.split("\n"), 1):
        try:
            if line.startswith("#"):
                _comment(line, types, helps, seen)
            elif line.strip():
                family, metric, value = _sample(line, types)
                seen.add(family)
                if metric in series:
                    raise ValueError("the same series again")
                series[metric] = value
                if len(series) > MAX_SERIES:
                    raise ValueError(f"more than {MAX_SERIES} series")
        except ValueError as e:
            raise ValueError(f"line {number}: {e}") from None
    return {f: (types.get(f, "untyped"), helps.get(f, "")) for f in seen | set(types) | set(helps)}, series


def _comment(line: str, types: dict, helps: dict, seen: set) -> None:
    parts = line[1:].lstrip(" \t").split(None, 2)
    if len(parts) < 2 or parts[0] not in ("HELP", "TYPE"):
        return   # a plain comment
    keyword, family, rest = parts[0], parts[1], parts[2] if len(parts) == 3 else ""
    if not re.fullmatch(_NAME, family):
        raise ValueError(f"{keyword} of an invalid metric name {family!r}")
    table = helps if keyword == "HELP" else types
    if family in table:
        raise ValueError(f"a second {keyword} line for {family}")
    if keyword == "TYPE":
        if rest.strip() not in TYPES:
            raise ValueError(f"unknown type {rest.strip()!r} for {family}")
        if family in seen:
            raise ValueError(f"TYPE for {family} after its samples")
        rest = rest.strip()
    table[family] = _unescape(rest, '\\n') if keyword == "HELP" else rest


def _sample(line: str, types: dict) -> tuple[str, str, float]:
    """(family, wire name, value) of a sample line."""
    m = _SAMPLE.fullmatch(line)
    if m is None:
        raise ValueError("not NAME{LABELS} VALUE")
    metric, labels_text, value, timestamp = m.groups()
    if not _VALUE.fullmatch(value):
        raise ValueError(f"{metric}: value {value!r} is no number")
    if timestamp is not None:
        raise ValueError(f"{metric} has a timestamp, which node_exporter's textfile collector refuses")
    if metric.startswith(_RESERVED):
        raise ValueError(f"{metric}: names under {' or '.join(_RESERVED)} are the agent's and the daemon's own")
    labels = _labels(labels_text or "")
    family = next((metric.removesuffix(s) for s in _SUFFIXES.get(types.get(_base(metric)), ())
                   if metric.endswith(s)), metric)
    return family, name(wire.TEXTFILE + metric, *labels.items()), float(value)


def _base(metric: str) -> str:
    return next((metric.removesuffix(s) for s in ("_bucket", "_sum", "_count") if metric.endswith(s)), metric)


def _labels(text: str) -> dict[str, str]:
    labels, position = {}, 0
    while position < len(text.rstrip(" \t")):
        m = _LABEL.match(text, position)
        if m is None:
            raise ValueError(f"labels {text[:60]!r}: not NAME=\"VALUE\", … at character {position + 1}")
        key = m[1]
        if key in labels or key.startswith("__"):
            raise ValueError(f"label {key}: {'given twice' if key in labels else 'names under __ are reserved'}")
        labels[key] = _unescape(m[2], '\\"n')
        position = m.end()
    return labels


def _unescape(text: str, allowed: str) -> str:
    """`text` with its backslash escapes (of `allowed` characters) replaced; another escape raises."""
    def one(m: re.Match) -> str:
        if not m[1] or m[1] not in allowed:
            raise ValueError(f"invalid escape \\{m[1]} in {text[:60]!r}")
        return _ESCAPES[m[1]]
    return re.sub(r"\\(.?)", one, text)

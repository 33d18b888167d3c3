"""Wire protocol v1: msgpack frames between agents (DEALER) and the daemon (ROUTER).

Every frame is a msgpack map {v, type, node, boot, seq, ts, body}; `decode` validates all of it and
raises WireError(field, reason, code) naming the first thing that is wrong (with the frame's boot and
seq whenever those are readable, so a sender can settle it). Sample bodies are columnar (packed
float64): they are checked with byte-strided slices and integer masks, never a Python loop per value, and
without numpy (the agent does not install it; only `samples_arrays`, a reader for tests and benches, imports it).

Flow control: an agent whose handshake carries CREDIT_PROPERTY gets `credit` frames, the bytes it may
have unacked (docs/architecture.md); no other peer ever receives that type.

Metric, counter and parameter names follow one rule, METRIC_NAME: a letter or '_' first, then
letters, digits and '_', '.', ':', '-' (at most MAX_NAME characters). Readers may rely on it, but
still pass names to SQL as parameters.

A labelled series travels as one metric name, `labelled(base, labels)`: `base.label:value...`, labels
sorted, each value's characters outside [A-Za-z0-9_] as `-` and two hex digits per UTF-8 byte
(`node_filesystem_avail_bytes.device:-2fdev-2fvda.fstype:ext4.mountpoint:-2f`); `unlabelled` reverses it.
"""

from __future__ import annotations

import functools
import math
import re
import struct
import sys
import time
from array import array
from dataclasses import dataclass
from itertools import chain
from typing import Any

import msgpack

from causewatch.errors import WireError

VERSION = 1
MAX_FRAME_BYTES = 8 * 1024 * 1024
MAX_NAME = 256
# Before each name of a node's textfile series (agent/node/textfile.py): the daemon exports the rest as it is
TEXTFILE = "textfile:"
AGENT_TYPES = ("hello", "samples", "bbv", "task", "region", "probe_result", "heartbeat", "unit")
DAEMON_TYPES = ("ack", "nack", "run_probe", "credit")
# ZMTP handshake property by which an agent says it waits for the daemon's `credit` grants (see docs/architecture.md)
CREDIT_PROPERTY = "X-Credit"
# ZMTP handshake property by which the daemon's ROUTER names its HTTP API's URL: a client that
# reached the agents' port by mistake can say where the API is
HTTP_PROPERTY = "X-Http"
_SEQ_MAX = 2**63 - 1
# Sample times, unix seconds, lie within +-MAX_TIME: the store keeps them as integer milliseconds, exact
# below 2^53 ms (about 278,000 years either side of 1970).
MAX_TIME = float(2**43)
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]*")
MAX_SHOWN = 200               # characters of a peer's value echoed back in an error (no amplification)
# nack codes that say nothing is wrong with the frame itself: the sender keeps it and sends it again
RETRY_CODES = ("store", "identity")
# What a node runs that the agent follows by itself (docs/agent.md, "Units"): a unit is named KIND:ID,
# and its samples' scope is that name, so a reader tells a unit's series by the name alone.
UNIT_KINDS = ("job", "step", "service", "container", "pod")
UNIT_EVENTS = ("start", "update", "end")


@dataclass(frozen=True)
class Frame:
    type: str
    node: str
    boot: str
    seq: int
    ts: float
    body: dict
    v: int = VERSION


# ---- field kinds: each checks one value and returns it (possibly converted) or raises WireError ----

def _name(field, value):
    if not isinstance(value, str):
        raise WireError(field, f"expected a string, got {type(value).__name__}", "type")
    if not 0 < len(value) <= MAX_NAME:
        raise WireError(field, f"length {len(value)} outside 1..{MAX_NAME}", "name")
    if not value.isprintable():
        raise WireError(field, "contains control characters", "name")
    return value


def show(value) -> str:
    """repr of a peer-supplied value, cut to MAX_SHOWN characters (errors echo it back and log it)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}... ({len(text)} characters)"


def _metric(field, value):
    """A metric, counter or parameter name: METRIC_NAME, the one rule every reader relies on."""
    _name(field, value)
    if not METRIC_NAME.fullmatch(value):
        raise WireError(field, f"{show(value)} is not a metric name (a letter or '_', then letters, digits, "
                               "'_', '.', ':' or '-')", "name")
    return value


def _text(field, value):
    if not isinstance(value, str):
        raise WireError(field, f"expected a string, got {type(value).__name__}", "type")
    return value


def _as_is(field, value):
    return value


def _int(field, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise WireError(field, f"expected an integer, got {type(value).__name__}", "type")
    return value


def _float(field, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(field, f"expected a number, got {type(value).__name__}", "type")
    if not math.isfinite(value):
        raise WireError(field, f"{value} is not finite (send null for a missing value)", "nonfinite")
    return float(value)


def _scalar(field, value):
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    return _float(field, value)


def _opt_float(field, value):
    return None if value is None else _float(field, value)


def _at_least_zero(kind):
    def check(field, value):
        value = kind(field, value)
        if value < 0:
            raise WireError(field, f"{value} < 0", "range")
        return value
    return check


def _one_of(choices):
    def check(field, value):
        if value not in choices:
            raise WireError(field, f"{show(value)} is not one of {', '.join(choices)}", "range")
        return value
    return check


def _map_of(kind, key=_name):
    def check(field, value):
        if not isinstance(value, dict):
            raise WireError(field, f"expected a map, got {type(value).__name__}", "type")
        return {key(f"{field} key", k): kind(f"{field}.{k}", v) for k, v in value.items()}
    return check


def _list_of(kind):
    def check(field, value):
        if not isinstance(value, (list, tuple)):
            raise WireError(field, f"expected a list, got {type(value).__name__}", "type")
        return [kind(f"{field}[{i}]", v) for i, v in enumerate(value)]
    return check


_metrics = _list_of(_metric)


@functools.lru_cache(maxsize=4096)
def _known_metrics(field: str, names: tuple[str, ...]) -> None:
    _metrics(field, names)   # a list that fails raises, and is not remembered
    if len(set(names)) != len(names):
        raise WireError(field, "duplicate metric name", "name")


def _metric_list(field, value):
    """A list of metric names: an agent sends the same names frame after frame, so a list that passed
    is not checked name by name again (most of a samples frame's decoding time was these checks)."""
    if isinstance(value, list):
        try:
            _known_metrics(field, tuple(value))   # checks each name the first time (a non-string fails there)
            return value
        except TypeError:   # an unhashable name (a list, a map): named by the check below
            pass
    return _metrics(field, value)


def _bytes(field, value):
    if not isinstance(value, bytes):
        raise WireError(field, f"expected packed bytes, got {type(value).__name__}", "type")
    return value


_SPARSE = {"keys": (_list_of(_name), True), "counts": (_list_of(_int), True)}


def _sparse(field, value):
    """A sparse vector {keys: [name], counts: [int >= 0]}, the key table and the counts aligned."""
    body = _check_body(field, value, _SPARSE)
    if len(body["keys"]) != len(body["counts"]):
        raise WireError(f"{field}.counts", f"{len(body['counts'])} counts for {len(body['keys'])} keys", "shape")
    if any(c < 0 for c in body["counts"]):
        raise WireError(f"{field}.counts", "counts must be >= 0", "range")
    return body


_EXTRA = (_map_of(_scalar), False)
# The envelope; "v" is checked before it (an unsupported version is named as such, not as a bad field).
_ENVELOPE = {"v": (_as_is, True), "type": (_text, True), "node": (_name, True), "boot": (_name, True),
             "seq": (_int, True), "ts": (_float, True), "body": (_as_is, True)}
SCHEMAS: dict[str, dict[str, tuple]] = {
    "hello": {"hostname": (_name, True), "agent_version": (_name, True), "cpu_model": (_text, False),
              "cores": (_int, False), "memory_bytes": (_int, False),
              "counters": (_map_of(_text, _metric), False), "extra": _EXTRA,
              # {node collector: {"interval": seconds, "state": "ok" | reason}}
              "collectors": (_map_of(_map_of(_scalar), _metric), False)},
    "samples": {"scope": (_name, True), "t": (_bytes, True), "names": (_metric_list, True),
                "values": (_bytes, True), "nulls": (_bytes, False)},
    "bbv": {"target": (_name, True), "kind": (_name, True), "start": (_float, True), "end": (_float, True),
            "vector": (_sparse, True), "pid": (_int, False), "lost": (_int, False)},
    "task": {"app": (_name, True), "task_id": (_name, True), "start": (_float, True),
             "duration": (_float, True), "cpu_seconds": (_opt_float, False),
             "params": (_map_of(_scalar, _metric), False), "counters": (_map_of(_opt_float, _metric), False),
             "bbv": (_sparse, False), "extra": _EXTRA},
    "region": {"app": (_name, True), "region": (_name, True), "start": (_float, True),
               "duration": (_float, True), "calls": (_int, False), "cpu_seconds": (_opt_float, False),
               "counters": (_map_of(_opt_float, _metric), False), "bbv": (_sparse, False), "extra": _EXTRA},
    # a probe that failed on the node carries `error` (why) in place of its prediction (PREDICTION)
    "probe_result": {"app": (_name, True), "kit": (_name, True), "predicted_seconds": (_float, False),
                     "lo": (_float, False), "hi": (_float, False), "ratio": (_float, False),
                     "probe_seconds": (_float, False), "phases": (_list_of(_map_of(_scalar)), False),
                     "error": (_text, False), "extra": _EXTRA},
    "heartbeat": {},
    # a unit's start, a change of what is known of it, or its end (with its totals): once per change
    "unit": {"unit": (_name, True), "kind": (_one_of(UNIT_KINDS), True), "event": (_one_of(UNIT_EVENTS), True),
             "start": (_float, True), "end": (_float, False), "parent": (_name, False), "job_id": (_name, False),
             "step": (_name, False), "uid": (_at_least_zero(_int), False), "user": (_name, False),
             "job_name": (_text, False), "cpus": (_at_least_zero(_float), False), "cpuset": (_text, False),
             "memory_bytes": (_at_least_zero(_int), False), "gpus": (_at_least_zero(_int), False),
             "cgroup": (_text, False), "source": (_name, False), "counted": (_map_of(_text, _metric), False),
             "totals": (_map_of(_float, _metric), False), "extra": _EXTRA},
    "ack": {"seq": (_int, True), "boot": (_name, True)},
    "nack": {"seq": (_int, False), "boot": (_text, False), "field": (_text, True), "reason": (_text, True),
             "code": (_text, False)},
    "run_probe": {"app": (_name, True), "kit": (_name, True), "manifest": (_map_of(_as_is), False)},
    "credit": {"bytes": (_int, True)},   # bytes the agent may have unacked from now on (to CREDIT_PROPERTY agents)
}


# (field, a schema's id) -> (the schema, its (key, path, kind, required) rows): the paths a check names
# are formed once, not per frame (with the envelope's copy, a sixth of decoding a 5 x 50 samples frame)
_PLANS: dict[tuple[str, int], tuple[dict, tuple]] = {}


def _check_body(field: str, body: Any, schema: dict) -> dict:
    """The fields of `body` that `schema` (a module-level constant) knows, each checked by its kind."""
    if not isinstance(body, dict):
        raise WireError(field, f"expected a map, got {type(body).__name__}", "type")
    for key in body:
        if key not in schema:
            raise WireError(f"{field}.{str(key)[:MAX_SHOWN]}", f"unknown field (known: {', '.join(schema) or 'none'})",
                          "field")
    plan = _PLANS.get((field, id(schema)))
    if plan is None or plan[0] is not schema:
        plan = _PLANS[(field, id(schema))] = (schema, tuple((key, f"{field}.{key}", kind, required)
                                                            for key, (kind, required) in schema.items()))
    out = {}
    for key, path, kind, required in plan[1]:
        if key in body:
            out[key] = kind(path, body[key])
        elif required:
            raise WireError(path, "missing", "missing")
    return out


# Byte tables for the masks below: over the bytes of packed little-endian float64, byte 7 holds the
# sign and the exponent's top 7 bits, byte 6 the exponent's low 4 bits above the mantissa's top 4.
_EXP_HIGH = bytes(int((b & 0x7F) == 0x7F) for b in range(256))
_EXP_LOW = bytes(int((b & 0xF0) == 0xF0) for b in range(256))
_MANT_HIGH = bytes(int((b & 0x0F) != 0) for b in range(256))
_NONZERO = bytes(int(b != 0) for b in range(256))
_ZERO = bytes(int(b == 0) for b in range(256))


def _mask(flags: bytes) -> int:
    """Per-value 0/1 flag bytes as one integer: value i is bit 8*i, so masks combine with & | ~ in C."""
    return int.from_bytes(flags, "little")


def nonfinite_mask(packed: bytes) -> int:
    """Mask (see `_mask`) of the inf and NaN values in packed little-endian float64: all ones in the
    exponent, found with two strided slices and table lookups, not a loop per value."""
    high = packed[7::8].translate(_EXP_HIGH)
    if 1 not in high:   # no value of magnitude 2^1009 or more, the common case: one slice and one lookup
        return 0
    return _mask(high) & _mask(packed[6::8].translate(_EXP_LOW))


def nan_mask(packed: bytes) -> int:
    """Mask of the NaN values: non-finite with a nonzero mantissa (inf has none)."""
    nonfinite = nonfinite_mask(packed)
    if not nonfinite:
        return 0
    mantissa = _mask(packed[6::8].translate(_MANT_HIGH))
    for k in range(6):
        mantissa |= _mask(packed[k::8].translate(_NONZERO))
    return nonfinite & mantissa


def _first(mask: int) -> int:
    """Index of the first value set in a nonzero mask."""
    return ((mask & -mask).bit_length() - 1) // 8


PREDICTION = ("predicted_seconds", "lo", "hi", "ratio", "probe_seconds")


def _check_probe_result(body: dict) -> None:
    """A probe_result holds its prediction, or a non-empty `error` saying why the probe failed."""
    if "error" in body:
        if not body["error"].strip():
            raise WireError("body.error", "empty (say why the probe failed)", "range")
        return
    for key in PREDICTION:
        if key not in body:
            raise WireError(f"body.{key}", "missing (a probe_result without an error carries its prediction)",
                            "missing")


def unit_kind(scope: str) -> str | None:
    """The kind of unit a samples scope names (`job:42` -> job), or None for any other scope."""
    kind, sep, _ = scope.partition(":")
    return kind if sep and kind in UNIT_KINDS else None


def _check_unit(body: dict) -> None:
    """A unit is named after its kind (KIND:ID); its end lies after its start, and an end event has one."""
    if unit_kind(body["unit"]) != body["kind"] or body["unit"] == f"{body['kind']}:":
        raise WireError("body.unit", f"{show(body['unit'])} is not named {body['kind']}:ID after its kind", "name")
    if body["event"] == "end" and "end" not in body:
        raise WireError("body.end", "missing (an end event says when the unit ended)", "missing")
    if "end" in body and body["end"] < body["start"]:
        raise WireError("body.end", f"{body['end']} is before the start {body['start']}", "range")


def _check_samples(body: dict) -> None:
    t, names, values = body["t"], body["names"], body["values"]
    if len(t) % 8 or len(values) % 8:
        raise WireError("body.t" if len(t) % 8 else "body.values", "length is not a multiple of 8 (float64)", "shape")
    n_t, n_m = len(t) // 8, len(names)
    if len(values) != 8 * n_t * n_m:
        raise WireError("body.values", f"{len(values) // 8} values for {n_t} timestamps x {n_m} names", "shape")
    if nonfinite_mask(t):
        raise WireError("body.t", "timestamps must be finite", "nonfinite")
    times = struct.unpack(f"<{n_t}d", t)
    if times and not -MAX_TIME < min(times) <= max(times) < MAX_TIME:
        raise WireError("body.t", f"timestamps must lie within +-{MAX_TIME:.0f} s (unix seconds)", "range")
    bad = nonfinite_mask(values)
    if "nulls" in body:
        if len(body["nulls"]) != n_t * n_m:
            raise WireError("body.nulls", f"{len(body['nulls'])} flags for {n_t * n_m} values", "shape")
        if bad:
            bad &= _mask(body["nulls"].translate(_ZERO))   # not flagged null (no ~: negative ints are slow)
    if bad:
        i = _first(bad)
        raise WireError(f"body.values[{i // n_m}][{names[i % n_m]}]",
                        f"{struct.unpack_from('<d', values, 8 * i)[0]} is not finite and not flagged null",
                        "nonfinite")


def decode(data: bytes, max_bytes: int = MAX_FRAME_BYTES, types=AGENT_TYPES) -> Frame:
    """Parse and validate one frame; raise WireError naming the first field that is wrong."""
    if len(data) > max_bytes:
        raise WireError("frame", f"{len(data)} bytes exceeds the cap of {max_bytes}", "oversize")
    try:
        msg = msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:  # msgpack raises several unrelated types for garbage
        raise WireError("frame", f"not a msgpack map ({type(e).__name__}: {str(e)[:MAX_SHOWN]})", "decode") from None
    if not isinstance(msg, dict):
        raise WireError("frame", f"expected a msgpack map, got {type(msg).__name__}", "decode")
    try:
        return _decode_map(msg, types)
    except WireError as e:
        e.boot, e.seq = _readable_key(msg)
        raise


def _readable_key(msg: dict) -> tuple[str | None, int | None]:
    """The frame's (boot, seq) when both are valid, else (None, None): what a nack echoes."""
    boot, seq = msg.get("boot"), msg.get("seq")
    try:
        _name("boot", boot)
        _int("seq", seq)
    except WireError:
        return None, None
    return (boot, seq) if 0 < seq <= _SEQ_MAX else (None, None)


_SAMPLES_KEYS = {"scope", "t", "names", "values"}


def _plain_name(value) -> bool:
    return type(value) is str and 0 < len(value) <= MAX_NAME and value.isprintable()


def _samples_at_once(msg: dict) -> Frame | None:
    """A samples frame whose envelope and body pass every check `_check_body` makes, made in one function
    (the common frame: its field by field checks were most of decoding it); None when any check fails or
    a field needs converting (an integer `ts`), and the general path then names what is wrong."""
    if msg.keys() != _ENVELOPE.keys():
        return None
    node, boot, seq, ts, body = msg["node"], msg["boot"], msg["seq"], msg["ts"], msg["body"]
    if not (_plain_name(node) and _plain_name(boot) and type(seq) is int and 0 < seq <= _SEQ_MAX
            and type(ts) is float and math.isfinite(ts) and type(body) is dict):
        return None
    keys = body.keys()
    nulls = body.get("nulls")
    if not (keys == _SAMPLES_KEYS or (keys - {"nulls"} == _SAMPLES_KEYS and type(nulls) is bytes)):
        return None
    scope, t, names, values = body["scope"], body["t"], body["names"], body["values"]
    if not (_plain_name(scope) and type(t) is bytes and type(values) is bytes and type(names) is list):
        return None
    try:
        _known_metrics("body.names", tuple(names))
    except (WireError, TypeError):
        return None
    out = {"scope": scope, "t": t, "names": names, "values": values}
    if nulls is not None:
        out["nulls"] = nulls
    _check_samples(out)
    return Frame("samples", node, boot, seq, ts, out)


def _decode_map(msg: dict, types) -> Frame:
    version = msg.get("v")
    if type(version) is not int or version != VERSION:   # True and 1.0 compare equal to 1: not versions
        raise WireError("v", f"protocol version {show(version)} is not supported (expected {VERSION})", "version")
    kind = msg.get("type")
    if kind not in types:
        raise WireError("type", f"unknown message type {show(kind)} (expected one of {', '.join(types)})", "type")
    if kind == "samples":
        frame = _samples_at_once(msg)
        if frame is not None:
            return frame
    env = _check_body("frame", msg, _ENVELOPE)
    if not 0 < env["seq"] <= _SEQ_MAX:
        raise WireError("seq", f"{env['seq']} outside 1..2^63-1", "range")
    body = _check_body("body", env["body"], SCHEMAS[kind])
    if kind == "samples":
        _check_samples(body)
    elif kind == "probe_result":
        _check_probe_result(body)
    elif kind == "unit":
        _check_unit(body)
    return Frame(kind, env["node"], env["boot"], env["seq"], env["ts"], body)


def encode(kind: str, node: str, boot: str, seq: int, body: dict, ts: float | None = None) -> bytes:
    """Pack one frame; the sender and the daemon both build frames only through here."""
    return msgpack.packb({"v": VERSION, "type": kind, "node": node, "boot": boot, "seq": seq,
                          "ts": time.time() if ts is None else ts, "body": body}, use_bin_type=True)


def _float64s(x, count: int, what: str) -> bytes:
    """`count` numbers as packed little-endian float64: a numpy float64 array through its buffer (a
    C-level copy), anything else (other dtypes, flat or nested lists) through array('d')."""
    try:
        view = memoryview(x)
    except TypeError:   # no buffer: a list
        view = None
    out = array("d")
    if view is not None and view.format == "d":
        out.frombytes(view.tobytes())
    else:
        items = x.tolist() if hasattr(x, "tolist") else x
        try:
            out.extend(items)
        except TypeError:   # rows of numbers
            out.extend(chain.from_iterable(items))
    if len(out) != count:
        raise ValueError(f"{what}: {len(out)} numbers where {count} were expected")
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def samples_body(t, names, values, scope: str = "node") -> dict:
    """Columnar samples: len(t) timestamps x len(names) metrics, values flat or as rows (lists or a
    numpy array); NaN in `values` is sent as null."""
    names = list(names)
    packed = _float64s(values, len(t) * len(names), "values")
    body = {"scope": scope, "t": _float64s(t, len(t), "t"), "names": names, "values": packed}
    nans = nan_mask(packed)
    if nans:
        body["nulls"] = nans.to_bytes(len(packed) // 8, "little")
    return body


def samples_arrays(body: dict):
    """(timestamps, names, values T x M, null mask or None) of a validated samples body as numpy arrays,
    without copies, for readers that compare with what was sent (tests, benches; the daemon's writer joins
    the bodies' bytes itself). numpy is imported here, never by the agent."""
    import numpy as np
    t = np.frombuffer(body["t"], "<f8")
    values = np.frombuffer(body["values"], "<f8").reshape(len(t), len(body["names"]))
    nulls = body.get("nulls")
    mask = np.frombuffer(nulls, np.uint8).reshape(values.shape).astype(bool) if nulls else None
    return t, body["names"], values, mask


_ESCAPE = re.compile(r"[^A-Za-z0-9_]")
_ESCAPED = re.compile(r"(?:-[0-9a-f]{2})+")


def _escape(match: re.Match) -> str:
    return "".join(f"-{b:02x}" for b in match.group().encode())


def labelled(base: str, labels: dict[str, str]) -> str:
    """One metric name for the series `base{labels}` (label names are plain words: [a-z_]+)."""
    return base + "".join(f".{k}:{_ESCAPE.sub(_escape, str(v))}" for k, v in sorted(labels.items()))


def _unescape(match: re.Match) -> str:
    return bytes.fromhex(match.group().replace("-", "")).decode(errors="replace")


def unlabelled(metric: str) -> tuple[str, dict[str, str]]:
    """(base, labels) of a name `labelled` made; a name without labels is (itself, {}); a part that is
    no `label:value` (the older `NAME.cpuN`) stays in the base."""
    base, *parts = metric.split(".")
    labels = {}
    for part in parts:
        key, sep, value = part.partition(":")
        if sep:
            labels[key] = _ESCAPED.sub(_unescape, value)
        else:
            base = f"{base}.{part}"
    return base, labels


def sparse(counts: dict[str, int]) -> dict:
    """A {key: count} mapping as the wire's sparse vector."""
    return {"keys": list(counts), "counts": [int(c) for c in counts.values()]}

"""Wire protocol v1: round trips, and every refusal names its field."""

import math
import struct

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from support import HOSTILE_UNITS, UNIT

from causewatch import wire
from causewatch.errors import WireError


def frame(kind="samples", body=None, **env):
    msg = {"v": 1, "type": kind, "node": "n1", "boot": "b1", "seq": 1, "ts": 1.0,
           "body": body if body is not None else wire.samples_body([1.0], ["m"], [[2.0]])}
    msg.update(env)
    return msgpack.packb(msg, use_bin_type=True)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 20), st.integers(1, 8)),
              elements=st.floats(allow_nan=True, allow_infinity=False, width=64)))
def test_samples_round_trip_keeps_values_and_nulls(values):
    t = np.arange(values.shape[0], dtype=float)
    names = [f"m{i}" for i in range(values.shape[1])]
    f = wire.decode(wire.encode("samples", "n", "b", 7, wire.samples_body(t, names, values, scope="pid:1")))
    t2, names2, values2, mask = wire.samples_arrays(f.body)
    assert (f.type, f.seq, f.body["scope"], names2) == ("samples", 7, "pid:1", names)
    np.testing.assert_array_equal(t2, t)
    nan = np.isnan(values)
    np.testing.assert_array_equal(values2[~nan], values[~nan])
    assert (mask if mask is not None else np.zeros_like(nan)).tolist() == nan.tolist()


SPECIAL = [0.0, -0.0, 1.0, -2.5, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
           math.inf, -math.inf, math.nan, -math.nan]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 2**64 - 1).map(lambda b: struct.pack("<Q", b)),
                          st.sampled_from(SPECIAL).map(lambda x: struct.pack("<d", x)),
                          # an all-ones exponent with a single mantissa bit set: a NaN only that bit tells
                          st.tuples(st.integers(0, 51), st.booleans()).map(
                              lambda kb: struct.pack("<Q", (kb[1] << 63) | (0x7FF << 52) | (1 << kb[0])))),
                max_size=40))
def test_nonfinite_masks_agree_with_math_value_by_value(words):
    """The byte-slice masks against math.isinf/isnan on hand-packed float64 bit patterns."""
    values = [struct.unpack("<d", w)[0] for w in words]
    nonfinite, nan = wire.nonfinite_mask(b"".join(words)), wire.nan_mask(b"".join(words))
    assert [(nonfinite >> 8 * i) & 1 for i in range(len(values))] == [int(not math.isfinite(v)) for v in values]
    assert [(nan >> 8 * i) & 1 for i in range(len(values))] == [int(math.isnan(v)) for v in values]


def test_samples_bodies_from_lists_rows_and_numpy_are_the_same_bytes():
    rows = [[1.0, math.nan, 3], [math.inf, -0.0, 2**53 + 1]]
    as_numpy = wire.samples_body(np.array([1.0, 2.0]), ["a", "b", "c"], np.array(rows))
    assert wire.samples_body([1, 2], ["a", "b", "c"], rows) == as_numpy
    assert wire.samples_body((1.0, 2.0), iter(["a", "b", "c"]), [v for row in rows for v in row]) == as_numpy
    strided = np.array(rows).T.copy().T                            # Fortran order: a strided buffer
    assert not strided.flags.c_contiguous
    assert wire.samples_body(np.arange(1, 3), ["a", "b", "c"], strided) == as_numpy
    assert wire.samples_body(np.arange(1, 3), ["a", "b", "c"], np.array(rows, ">f8")) == as_numpy
    assert as_numpy["values"] == struct.pack("<6d", 1.0, math.nan, 3.0, math.inf, -0.0, float(2**53 + 1))
    assert as_numpy["nulls"] == bytes([0, 1, 0, 0, 0, 0])      # NaN is null; inf stays a value (and is refused)
    assert "nulls" not in wire.samples_body([1.0], ["a"], [[2.0]])
    with pytest.raises(ValueError, match="values: 5 numbers where 6 were expected"):
        wire.samples_body([1, 2], ["a", "b", "c"], [1.0] * 5)


@pytest.mark.parametrize("data, field, code", [
    (b"\xc1garbage", "frame", "decode"),
    (msgpack.packb([1, 2]), "frame", "decode"),
    (frame(v=2), "v", "version"),
    (frame(kind="teleport", body={}), "type", "type"),
    (frame(seq="1"), "frame.seq", "type"),
    (frame(seq=-3), "seq", "range"),
    (frame(node=""), "frame.node", "name"),
    (frame(node="a\nb"), "frame.node", "name"),
    (frame(ts=math.inf), "frame.ts", "nonfinite"),
    (frame(kind="hello", body={"hostname": "h"}), "body.agent_version", "missing"),
    (frame(kind="hello", body={"hostname": "h", "agent_version": "1", "colour": 3}), "body.colour", "field"),
    (frame(body={"scope": "n", "t": np.array([1.0]).tobytes(), "names": ["m"],
                 "values": np.array([math.nan]).tobytes()}), "body.values[0][m]", "nonfinite"),
    (frame(body={"scope": "n", "t": np.array([1.0]).tobytes(), "names": ["m", "k"],
                 "values": np.array([1.0]).tobytes()}), "body.values", "shape"),
    (frame(kind="task", body={"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0,
                              "counters": {"c": math.nan}}), "body.counters.c", "nonfinite"),
    (frame(kind="bbv", body={"target": "t", "kind": "native", "start": 0.0, "end": 1.0,
                             "vector": {"keys": ["f"], "counts": [1, 2]}}), "body.vector.counts", "shape"),
    # a probe result holds its prediction, or why the probe failed
    (frame(kind="probe_result", body={"app": "a", "kit": "k", "predicted_seconds": 1.0, "lo": 0.9, "hi": 1.1,
                                      "ratio": 1.0}), "body.probe_seconds", "missing"),
    (frame(kind="probe_result", body={"app": "a", "kit": "k"}), "body.predicted_seconds", "missing"),
    (frame(kind="probe_result", body={"app": "a", "kit": "k", "error": " "}), "body.error", "range"),
    (frame(kind="probe_result", body={"app": "a", "kit": "k", "error": 3}), "body.error", "type"),
    *((frame(kind="unit", body={**UNIT, **bad}), field, code) for bad, field, code in HOSTILE_UNITS),
])
def test_refusals_name_the_field(data, field, code):
    with pytest.raises(WireError) as e:
        wire.decode(data)
    assert (e.value.field, e.value.code) == (field, code)
    assert field in str(e.value)


def test_a_unit_record_round_trips():
    body = {**UNIT, "event": "end", "end": 160.0, "parent": "job:41", "job_id": "42", "step": "batch", "uid": 1001,
            "user": "ann", "job_name": "train run", "cpus": 1.5, "cpuset": "0-3", "memory_bytes": 2**33, "gpus": 2,
            "cgroup": "/sys/fs/cgroup/job_42", "source": "cgroup", "counted": {"cpu": "ok", "io": "no io.stat"},
            "totals": {"unit_cpu_seconds_total": 12.5}, "extra": {"runtime": "docker"}}
    assert wire.decode(frame(kind="unit", body=body)).body == body
    assert [wire.unit_kind(s) for s in ("job:42", "pod:x", "app:lu", "node", "cgroup:a:b")] == [
        "job", "pod", None, None, None]


def test_a_failed_probe_result_carries_its_reason_in_place_of_a_prediction():
    body = {"app": "a", "kit": "k", "error": "No module named 'solver'", "probe_seconds": 0.2}
    assert wire.decode(frame(kind="probe_result", body=body)).body == body


def test_oversize_is_refused_before_parsing():
    with pytest.raises(WireError) as e:
        wire.decode(b"\x00" * 101, max_bytes=100)
    assert e.value.code == "oversize" and "101 bytes" in e.value.reason


def test_explicit_null_counter_is_accepted():
    f = wire.decode(frame(kind="task", body={"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0,
                                             "counters": {"cycles": None, "task-clock": 2}}))
    assert f.body["counters"] == {"cycles": None, "task-clock": 2.0}


@pytest.mark.parametrize("version", [True, 1.0, "1", None, 2])
def test_only_the_integer_1_is_version_1(version):
    """v = True and v = 1.0 were accepted as version 1."""
    with pytest.raises(WireError) as e:
        wire.decode(frame(v=version))
    assert (e.value.field, e.value.code) == ("v", "version")


@pytest.mark.parametrize("bad", [
    {"v": 9}, {"type": "gossip"}, {"colour": 1}, {"ts": math.nan}, {"node": ""},
    {"body": {"scope": "n"}}, {"v": "x" * 800_000}])
def test_refusals_echo_boot_and_seq_whenever_they_are_readable(bad):
    """A bad v, type, envelope field or NaN ts gave a nack a sender could never settle."""
    with pytest.raises(WireError) as e:
        wire.decode(frame(seq=77, boot="b9", **bad))
    assert (e.value.boot, e.value.seq) == ("b9", 77)


@pytest.mark.parametrize("bad", [{"seq": "77"}, {"seq": 0}, {"boot": ""}, {"boot": 5}])
def test_unreadable_boot_or_seq_is_not_echoed(bad):
    with pytest.raises(WireError) as e:
        wire.decode(frame(v=2, **bad))
    assert (e.value.boot, e.value.seq) == (None, None)


def test_echoed_values_are_truncated():
    """An 800 KB string in v came back whole in the nack."""
    with pytest.raises(WireError) as e:
        wire.decode(frame(v="x" * 800_000))
    assert len(str(e.value)) < 2 * wire.MAX_SHOWN + 200


@pytest.mark.parametrize("name", ["x\\", "*", "a b", "1abc", "a\"b", "a'b", "$.x", "é"])
@pytest.mark.parametrize("where", ["samples", "counters", "params"])
def test_metric_counter_and_parameter_names_follow_one_rule(name, where):
    """A counter key `x\\` or `*` passed validation and broke /api/bottlenecks."""
    if where == "samples":
        data = frame(body=wire.samples_body([1.0], [name], [[1.0]]))
    else:
        data = frame("task", {"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0, where: {name: 1.0}})
    with pytest.raises(WireError) as e:
        wire.decode(data)
    assert e.value.code == "name" and "metric name" in e.value.reason


@given(st.from_regex(wire.METRIC_NAME, fullmatch=True).filter(lambda s: len(s) <= wire.MAX_NAME))
@settings(max_examples=50, deadline=None)
def test_names_that_follow_the_rule_pass(name):
    body = {"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0, "params": {name: 1}, "counters": {name: 1.0}}
    assert wire.decode(frame("task", body)).body["counters"] == {name: 1.0}


def test_a_names_list_is_checked_every_time_until_it_passes():
    """Lists that passed are remembered (decoding speed); one that failed is refused again, not remembered."""
    bad = wire.encode("samples", "n", "b", 1, wire.samples_body([1.0], ["ok", "x\\"], [[1.0, 2.0]]))
    for _ in range(2):
        with pytest.raises(WireError) as e:
            wire.decode(bad)
        assert e.value.field == "body.names[1]"
    good = wire.encode("samples", "n", "b", 1, wire.samples_body([1.0], ["ok", "x"], [[1.0, 2.0]]))
    assert [wire.decode(good).body["names"] for _ in range(2)] == [["ok", "x"]] * 2
    with pytest.raises(WireError, match="expected a string"):   # a non-string among cached names' lookalikes
        wire.decode(wire.encode("samples", "n", "b", 1, {**wire.samples_body([1.0], ["ok", "x"], [[1.0, 2.0]]),
                                                          "names": ["ok", 7]}))


def test_the_samples_fast_path_accepts_only_what_the_general_path_accepts_and_alike():
    """`_samples_at_once` (the common samples frame in one function) gives the general path's frame for a
    valid one and steps aside (None) for anything the general path would convert or refuse."""
    import math as _math

    body = wire.samples_body([1.0, 2.0], ["a", "b"], [[1.0, float("nan")], [3.0, 4.0]])
    good = {"v": 1, "type": "samples", "node": "n", "boot": "b", "seq": 3, "ts": 2.5, "body": body}
    fast = wire._samples_at_once(good)
    env = wire._check_body("frame", good, wire._ENVELOPE)
    general = wire.Frame("samples", env["node"], env["boot"], env["seq"], env["ts"],
                         wire._check_body("body", env["body"], wire.SCHEMAS["samples"]))
    assert fast == general and list(fast.body) == list(general.body)
    bad = [{**good, "ts": 2}, {**good, "ts": _math.inf}, {**good, "seq": True}, {**good, "seq": 0},
           {**good, "node": "x\n"}, {**good, "node": "x" * 300}, {**good, "extra": 1},
           {k: v for k, v in good.items() if k != "ts"}, {**good, "body": {**body, "more": 1}},
           {**good, "body": {**body, "names": ("a", "b")}}, {**good, "body": {**body, "names": ["a", "a"]}},
           {**good, "body": {**body, "names": ["a", [1]]}}, {**good, "body": {**body, "t": bytearray(body["t"])}},
           {**good, "body": {**body, "nulls": "x"}}, {**good, "body": {k: v for k, v in body.items() if k != "t"}}]
    for msg in bad:
        assert wire._samples_at_once(msg) is None, msg

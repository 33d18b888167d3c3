"""Wire protocol v1: round trips, and every refusal names its field."""

import math

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

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
])
def test_refusals_name_the_field(data, field, code):
    with pytest.raises(WireError) as e:
        wire.decode(data)
    assert (e.value.field, e.value.code) == (field, code)
    assert field in str(e.value)


def test_oversize_is_refused_before_parsing():
    with pytest.raises(WireError) as e:
        wire.decode(b"\x00" * 101, max_bytes=100)
    assert e.value.code == "oversize" and "101 bytes" in e.value.reason


def test_explicit_null_counter_is_accepted():
    f = wire.decode(frame(kind="task", body={"app": "a", "task_id": "1", "start": 0.0, "duration": 1.0,
                                             "counters": {"cycles": None, "task-clock": 2}}))
    assert f.body["counters"] == {"cycles": None, "task-clock": 2.0}

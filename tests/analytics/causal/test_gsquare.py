"""Tests of causewatch.analytics.causal.gsquare: the counting G² against a plain reference (np.unique
cells, pandas strata), with unobserved cells and multi-column blocks."""

import math

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import entropy
from causewatch.analytics.causal.gsquare import Counter


def reference(codes, x, y, z):
    bits = entropy.discrete_cmi_bits(codes.astype(float), x, y, z)
    cells = pd.DataFrame({"x": entropy.cell_codes(codes[:, x]), "y": entropy.cell_codes(codes[:, y]),
                          "z": entropy.cell_codes(codes[:, z]) if z else 0})
    strata = [g for _, g in cells.groupby("z")]
    df = sum(max(g.x.nunique() - 1, 0) * max(g.y.nunique() - 1, 0) for g in strata)
    return 2 * len(codes) * math.log(2) * bits, df, bits


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("x,y,z", [([0], [1], []), ([0], [1], [2]), ([1], [3], [0, 2]), ([0, 1], [3], [2]),
                                   ([2], [0], [1, 3, 4])])
def test_counting_g2_equals_the_reference(seed, x, y, z):
    rng = np.random.default_rng(seed)
    n = 300
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4          # level 3 rare, some cells unobserved
    c = rng.integers(0, 5, n) * 7                # codes with gaps
    d = (b * c + rng.integers(0, 2, n)) % 6
    e = rng.integers(0, 2, n)
    codes = np.column_stack([a, b, c, d, e])
    g2, df, bits = Counter.from_codes(codes).g2(tuple(x), tuple(y), tuple(z))
    ref = reference(Counter.from_codes(codes).codes, x, y, z)
    assert (g2, bits) == pytest.approx((ref[0], ref[2]), abs=1e-9)
    assert df == ref[1]


def test_z_cells_are_encoded_once_per_conditioning_set():
    rng = np.random.default_rng(0)
    counter = Counter.from_codes(rng.integers(0, 3, (200, 4)))
    counter.g2((0,), (1,), (2, 3))
    cells = counter._cells[(2, 3)]
    counter.g2((1,), (0,), (3, 2))
    assert counter._cells[(2, 3)] is cells

"""Tests of causewatch.analytics.causal.gsquare: the counting G² against a plain reference (np.unique
cells, pandas strata), with unobserved cells and multi-column blocks."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special

from causewatch.analytics.causal import entropy, gsquare
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
    _, g2, df, _ = Counter.from_codes(codes).p_value(tuple(x), tuple(y), tuple(z), ceiling=0.0)
    ref = reference(Counter.from_codes(codes).codes, x, y, z)
    assert (g2, g2 / (2 * n * math.log(2))) == pytest.approx((ref[0], ref[2]), abs=1e-9)
    assert df == ref[1]


def test_z_cells_are_encoded_once_per_conditioning_set():
    rng = np.random.default_rng(0)
    counter = Counter.from_codes(rng.integers(0, 3, (200, 4)))
    counter.p_value((0,), (1,), (2, 3))
    cells = counter._cells[(2, 3)]
    counter.p_value((1,), (0,), (3, 2))
    assert counter._cells[(2, 3)] is cells


def _sparse_null(seed, n=60):
    """x ⊥ y | z on a sparse table: x of 2 and y of 3 levels in each of 4 z cells, 2.5 rows a cell."""
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 4, n)
    return np.column_stack([(z + rng.integers(0, 2, n)) % 4, (z * 3 + rng.integers(0, 3, n)) % 4, z])


def reference_permutation_p(codes, draws, rng):
    """The share of x-within-z permutations whose G² reaches the observed one (numpy and pandas)."""
    def g2(x):
        return reference(np.column_stack([x, codes[:, 1:]]), [0], [1], [2])[0]
    observed, strata = g2(codes[:, 0]), [np.flatnonzero(codes[:, 2] == s) for s in np.unique(codes[:, 2])]
    hits = 0
    for _ in range(draws):
        x = codes[:, 0].copy()
        for rows in strata:
            x[rows] = rng.permutation(x[rows])
        hits += g2(x) >= observed - 1e-9
    return hits / draws


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow   # thousands of permutations against a plain loop
def test_the_permutation_p_matches_a_plain_reference(seed):
    counter = Counter(Counter.from_codes(_sparse_null(seed)).codes)
    p = counter.p_value((0,), (1,), (2,), ceiling=1.0)[0]
    expected = reference_permutation_p(counter.codes, 400, np.random.default_rng(seed))
    draws = min(gsquare.PERMUTATION_HITS / p, gsquare.PERMUTATIONS)   # sequential: p to about a third
    assert abs(p - expected) <= 4 * math.sqrt(p * (1 - p) / draws) + 0.02, (p, expected)


def test_sparse_tables_are_permuted_unless_clearly_independent():
    seen = set()
    for seed in range(20):
        counter = Counter(Counter.from_codes(_sparse_null(seed)).codes)
        p, g2, df, permuted = counter.p_value((0,), (1,), (2,))
        assert g2 == pytest.approx(reference(counter.codes, [0], [1], [2])[0])
        chi_square = float(special.chdtrc(df, g2))
        assert permuted == (chi_square <= gsquare.CLEARLY_INDEPENDENT)
        assert p == chi_square or permuted
        seen.add(permuted)
    assert seen == {True, False}


def test_dense_tables_and_far_dependences_keep_the_chi_square_p():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 3, 3000)
    codes = np.column_stack([a, (a + rng.integers(0, 2, 3000)) % 3, rng.integers(0, 2, 3000)])
    counter = Counter(codes)
    p, g2, df, permuted = counter.p_value((0,), (1,), (2,))        # 3000 rows in 18 cells
    assert not permuted and p == pytest.approx(float(special.chdtrc(df, g2)))
    few = Counter(np.column_stack([a, a, codes[:, 2]])[:40])       # 40 rows in 18 cells, y = x
    p, g2, df, permuted = few.p_value((0,), (1,), (2,), floor=1e-4)
    assert not permuted and p < 1e-4
    assert few.p_value((0,), (1,), (2,), floor=0.0)[3]             # without the floor it would permute

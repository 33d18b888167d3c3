"""Tests of causewatch.analytics.causal.entropy: the numba kernel against its reference, known entropies,
and the drift of the papers' estimator that motivates the calibrated default."""

import math

import numpy as np
import pytest

from causewatch.analytics.causal import entropy


@pytest.mark.parametrize("discrete", [False, True])
def test_numba_kernel_matches_reference(discrete):
    rng = np.random.default_rng(0)
    widths = np.array([2, 1, 2])  # A: 2 rows, B: 1, C and D: 2 each
    data_t = rng.normal(size=(7, 80)) * 1.5
    ev_t = data_t[:, :50] + rng.normal(size=(7, 50)) * 0.3
    codes = rng.integers(0, 3, size=(3, 80)).astype(float) if discrete else np.zeros((3, 0))
    ev_codes = np.ascontiguousarray(codes[:, :50]) if discrete else codes
    fast = entropy._subspace_sums(ev_t, data_t, ev_codes, codes, widths, 3)
    np.testing.assert_allclose(fast, entropy.subspace_sums_reference(ev_t, data_t, ev_codes, codes, widths),
                               rtol=1e-9)


def test_polynomial_exp_matches_exp_and_vanishes_below_the_floor():
    a = np.linspace(entropy.EXP_FLOOR + 1e-9, 0.0, 2001)
    np.testing.assert_allclose([entropy._exp(v) for v in a], np.exp(a), rtol=4e-7)
    assert entropy._exp(entropy.EXP_FLOOR - 1.0) == 0.0


def test_nested_whitening_gives_each_subspace_its_own_bandwidth_matrix():
    # The kernel of subspace b is N(0, h²·Σ_b) with Σ_b the covariance of b's columns: computed here
    # directly per subspace, against the one nested transform of kernel_terms.
    rng = np.random.default_rng(8)
    z = rng.normal(size=(150, 2))
    x = z[:, 0] + 0.5 * rng.normal(size=150)
    y = np.sin(z[:, 1]) + x + 0.5 * rng.normal(size=150)
    data = np.column_stack([x, y, z])
    sums, logdet = entropy.kernel_terms(data, np.zeros(4, dtype=bool), [0], [1], [2, 3])
    h = entropy.bandwidths(data, np.zeros(4, dtype=bool), [0, 1, 2, 3], "kde")[0]
    for b, cols in enumerate(([2, 3], [0, 2, 3], [1, 2, 3], [0, 1, 2, 3])):
        cov = np.cov(data[:, cols], rowvar=False, bias=True) * h * h
        prec = np.linalg.inv(cov)
        diff = data[:, None, cols] - data[None, :, cols]
        direct = np.exp(-0.5 * np.einsum("ijk,kl,ijl->ij", diff, prec, diff)).sum(axis=1)
        np.testing.assert_allclose(sums[:, b], direct, rtol=1e-6)
        assert logdet[b] == pytest.approx(-0.5 * np.linalg.slogdet(cov)[1], rel=1e-6)


def test_counting_equals_indicator_kernel_for_discrete_columns():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 3, size=(200, 3)).astype(float)
    disc = np.ones(3, dtype=bool)
    sums, _ = entropy.kernel_terms(codes, disc, [0], [1], [2])
    via_kernel = np.mean(np.log(sums[:, 3] * sums[:, 0] / (sums[:, 1] * sums[:, 2]))) / math.log(2)
    assert entropy.discrete_cmi_bits(codes, [0], [1], [2]) == pytest.approx(via_kernel, abs=1e-12)


def test_discrete_entropy_is_counting():
    assert entropy.entropy(np.repeat([1, 2, 3, 4], 25), discrete=True) == pytest.approx(2.0)


def test_lemeire_entropy_of_uniform_in_bins_of_width_delta():
    # Eq. 11: H(X^Δ) ≈ h(X) - log2 Δ; for U(0, 1) and Δ = 0.01 that is log2(100) bits.
    x = np.random.default_rng(2).uniform(0, 1, 2000)
    assert entropy.entropy(x, estimator="lemeire", delta=0.01) == pytest.approx(math.log2(100), abs=0.15)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_kde_mutual_information_of_a_gaussian_pair(rho):
    rng = np.random.default_rng(3)
    x = rng.normal(size=1000)
    y = rho * x + math.sqrt(1 - rho * rho) * rng.normal(size=1000)
    truth = -0.5 * math.log2(1 - rho * rho)
    assert entropy.mutual_information(x, y) == pytest.approx(truth, abs=0.12)


def test_mutual_information_is_invariant_to_monotone_maps_for_kde():
    rng = np.random.default_rng(4)
    x = rng.uniform(0.1, 3, 400)
    y = x + 0.3 * rng.normal(size=400)
    assert entropy.mutual_information(np.exp(x), y ** 3) == pytest.approx(entropy.mutual_information(x, y), abs=1e-9)


def test_lemeire_estimate_on_independent_data_grows_with_sample_size():
    # Why the papers' estimator is not the default: bandwidth 4·range/n shrinks faster than the
    # spacing of points in 2-D, so the KDE of independent data turns spiky and "gains" bits.
    rng = np.random.default_rng(5)
    small = entropy.mutual_information(rng.uniform(size=200), rng.uniform(size=200), estimator="lemeire")
    large = entropy.mutual_information(rng.uniform(size=2000), rng.uniform(size=2000), estimator="lemeire")
    assert large > small + 1.0
    assert large > 0.4  # above the papers' threshold: independent columns judged dependent


def test_conditional_mi_vanishes_in_a_chain_and_not_in_a_collider():
    rng = np.random.default_rng(6)
    a = rng.normal(size=600)
    b = a + 0.5 * rng.normal(size=600)
    c = b + 0.5 * rng.normal(size=600)
    d = rng.normal(size=600)
    e = a + d + 0.3 * rng.normal(size=600)
    assert entropy.mutual_information(a, c, b) < 0.1
    assert entropy.mutual_information(a, d, e) > 0.2


def test_bad_input_names_the_problem():
    with pytest.raises(entropy.EntropyError, match="estimator 'knn' unknown"):
        entropy.mutual_information([1, 2, 3], [1, 2, 3], estimator="knn")
    with pytest.raises(entropy.EntropyError, match="NaN"):
        entropy.mutual_information([1, np.nan, 3], [1, 2, 3])

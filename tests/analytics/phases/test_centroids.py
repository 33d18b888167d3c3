"""What each phase does: its centroid over the original keys and its top keys (`phases` had found
23 phases without naming their top functions)."""

import numpy as np
import pytest
import scipy.sparse as sp

from causewatch.analytics.phases import PhaseError, SimPoint, phase_centroids, top_keys
from causewatch.analytics.phases import formats as fm


def _reference(X, labels, w, k):
    """The definition, densely: the weighted mean of each phase's rows divided by their sums."""
    X = np.asarray(X, float)
    sums = X.sum(axis=1, keepdims=True)
    unit = np.divide(X, sums, out=np.zeros_like(X), where=sums > 0)
    return np.stack([(w[labels == p, None] * unit[labels == p]).sum(axis=0) / w[labels == p].sum()
                     if (labels == p).any() else np.zeros(X.shape[1]) for p in range(k)])


def _planted(seed=2):
    rng = np.random.default_rng(seed)
    X = rng.poisson(rng.dirichlet(np.full(40, 0.2), size=60) * rng.uniform(50, 5000, size=(60, 1)))
    X[7] = 0                                        # an all-zero interval weighs but adds nothing
    return X, rng.integers(0, 4, size=60), rng.uniform(0.1, 2.0, size=60)


def test_centroids_are_the_weighted_mean_of_each_phase_s_normalised_rows():
    X, labels, w = _planted()
    got = phase_centroids(sp.csr_matrix(X), labels, w, 5).toarray()   # phase 4 has no interval: a zero row
    assert got.shape == (5, 40)
    assert np.allclose(got, _reference(X, labels, w, 5))
    assert np.allclose(phase_centroids(X, labels).toarray(), _reference(X, labels, np.ones(60), 4))


def test_a_file_read_in_chunks_gives_the_centroids_of_the_whole(tmp_path):
    X, labels, w = _planted()
    fm.write_frequency_vectors(tmp_path / "a.bb", X)
    chunked = phase_centroids(fm.iter_frequency_vectors(tmp_path / "a.bb", chunk_bytes=300), labels, w, 4)
    whole = phase_centroids(X, labels, w, 4).toarray()
    assert np.allclose(np.pad(chunked.toarray(), ((0, 0), (0, 40 - chunked.shape[1]))), whole)


def test_with_simpoint_s_interval_weights_a_phase_s_shares_sum_to_one():
    X, _, _ = _planted()
    X[7] = 1
    for fixed in (True, False):
        model = SimPoint(k=3, fixed_length=fixed, seed=1).fit(X)
        c = phase_centroids(X, model.labels_, model.interval_weights_, model.k_)
        assert np.allclose(c.toarray().sum(axis=1), 1.0)
        assert model.interval_weights_.sum() == pytest.approx(1.0)
    # fixed length off: an interval weighs its size, so a phase's centroid is its summed counts' mix
    p = model.labels_ == 0
    assert np.allclose(c.toarray()[0], X[p].sum(axis=0) / X[p].sum())


def test_top_keys_name_columns_and_add_up_a_function_s_blocks():
    X = np.array([[6, 3, 1, 0], [6, 3, 1, 0], [0, 0, 5, 5]])
    c = phase_centroids(X, [0, 0, 1])
    assert top_keys(c, 2) == [[(0, 0.6), (1, 0.3)], [(2, 0.5), (3, 0.5)]]            # ties by key
    assert top_keys(c, 5, ["main", "solve", "io", "z"])[0] == [("main", 0.6), ("solve", 0.3), ("io", 0.1)]
    by_function = top_keys(c, 3, {0: "solve", 1: "solve", 2: ""})                     # "" names nothing
    assert by_function == [[("solve", pytest.approx(0.9)), (2, pytest.approx(0.1))], [(2, 0.5), (3, 0.5)]]
    assert top_keys(c, 0) == [[], []]


@pytest.mark.parametrize("labels,weights,match", [
    ([0, 0], None, "more intervals than the 2 labels"),
    ([0, 0, 0, 1], None, "hold 3 intervals, the labels 4"),
    ([0, 0, -1], None, "labels must lie in"),
    ([0, 0, 1], [1.0], "one value per interval"),
])
def test_labels_that_do_not_fit_the_vectors_are_phase_errors(labels, weights, match):
    with pytest.raises(PhaseError, match=match):
        phase_centroids(np.ones((3, 2)), labels, weights)

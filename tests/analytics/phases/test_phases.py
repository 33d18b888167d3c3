"""Tests of analytics.phases: SimPoint formats, planted-phase recovery, determinism, the k-means kernel,
the sparse merge, the tracker."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from causewatch.analytics.phases import formats as fm
from causewatch.analytics.phases import keyed
from causewatch.analytics.phases import simpoint as ph
from causewatch.analytics.phases.ari import adjusted_rand_index
from causewatch.analytics.phases.merge import merge_close_phases
from causewatch.analytics.phases.tracker import PhaseTracker
from causewatch.cli import main

BLAS_THREADS = ("import sys; from causewatch.cli import main; from threadpoolctl import threadpool_info; "
                "main(sys.argv[1:]); print(sorted({p['num_threads'] for p in threadpool_info() "
                "if p['internal_api'] == 'openblas'}))")


@pytest.mark.parametrize("env, threads", [({}, "[1]"), ({"OPENBLAS_NUM_THREADS": "2"}, "[2]")])
def test_phases_command_runs_without_an_idle_blas_pool_unless_asked(tmp_path, env, threads):
    """The fit is single-threaded: the command's process loads OpenBLAS with one thread (an idle pool's
    threads spin), unless the caller's environment says otherwise."""
    fm.write_frequency_vectors(tmp_path / "app.bb", planted()[0])
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", BLAS_THREADS, "phases", str(tmp_path / "app.bb"), "--json"],
                         capture_output=True, text=True, env={**clean, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == threads


def planted(seed=1, sizes=(40, 30, 20, 10), blocks=300):
    """Intervals drawn around len(sizes) code mixes, shuffled; returns (counts, true phase)."""
    rng = np.random.default_rng(seed)
    mixes = [rng.dirichlet(np.full(blocks, 0.1)) for _ in sizes]
    rows, truth = [], []
    for phase, (mix, n) in enumerate(zip(mixes, sizes)):
        for _ in range(n):
            rows.append(rng.poisson(mix * rng.uniform(2e4, 2e5)))
            truth.append(phase)
    order = rng.permutation(len(rows))
    return np.array(rows)[order], np.array(truth)[order]


def test_frequency_vectors_round_trip(tmp_path):
    X, _ = planted(sizes=(5, 5))
    path = tmp_path / "app.bb"
    fm.write_frequency_vectors(path, X)
    back = fm.read_frequency_vectors(path)
    assert back.shape[0] == X.shape[0]
    assert np.array_equal(back.toarray(), X[:, :back.shape[1]])
    assert not X[:, back.shape[1]:].any()


def test_reads_valgrind_bb_with_comment_lines(tmp_path):
    path = tmp_path / "bb.out"
    path.write_text("T:1:10   :3:5   \nT:2:7   \n\n\n# Thread 2\n#   Total intervals: 1\nT:3:1   \n")
    X = fm.read_frequency_vectors(path)
    assert X.toarray().tolist() == [[10, 0, 5], [0, 7, 0], [0, 0, 1]]


@pytest.mark.parametrize("text", ["T:0:5\n", "T:1:x\n", "T1:5\n", "# nothing\n"])
def test_bad_frequency_vectors_raise(tmp_path, text):
    path = tmp_path / "bad.bb"
    path.write_text(text)
    with pytest.raises(fm.PhaseError):
        fm.read_frequency_vectors(path)


@pytest.mark.parametrize("chunk_bytes", [7, 64, 1 << 18])
def test_chunked_gzip_read_equals_the_token_parser(tmp_path, chunk_bytes):
    """The array parser, over chunks cut at any size (a line longer than a chunk too), reading .gz,
    gives what the token-by-token parser gives."""
    X, _ = planted(sizes=(6, 4))
    path = tmp_path / "app.bb"
    fm.write_frequency_vectors(path, X)
    text = "# exp-bbv header\n" + path.read_text() + "# Thread 1\n"
    with gzip.open(tmp_path / "app.bb.gz", "wt") as f:
        f.write(text)
    chunks = list(fm.iter_frequency_vectors(tmp_path / "app.bb.gz", chunk_bytes))
    whole = fm.read_frequency_vectors(tmp_path / "app.bb.gz")
    reference = fm._parse_tokens("app.bb", text.encode())
    assert sum(c.shape[0] for c in chunks) == 10
    assert np.array_equal(whole.toarray(), reference.toarray())
    assert np.array_equal(np.vstack([np.pad(c.toarray(), ((0, 0), (0, X.shape[1] - c.shape[1]))) for c in chunks]),
                          np.pad(whole.toarray(), ((0, 0), (0, X.shape[1] - whole.shape[1]))))


def test_fractional_counts_and_errors_in_a_later_chunk(tmp_path):
    path = tmp_path / "mixed.bb"
    path.write_text("T:1:5 :2:3\n" * 40 + "T:1:2.5 :3:1\n" + "T:2:4\n" * 40 + "T:2:-1\n")
    with pytest.raises(fm.PhaseError, match=r"mixed.bb:82: token ':2:-1'"):
        list(fm.iter_frequency_vectors(path, chunk_bytes=100))
    path.write_text("T:1:5 :2:3\n" * 40 + "T:1:2.5 :3:1\n")
    rows = fm.read_frequency_vectors(path)
    assert rows.shape == (41, 3) and rows.toarray()[40].tolist() == [2.5, 0, 1]


def test_fit_on_file_chunks_equals_fit_on_the_matrix(tmp_path):
    X, _ = planted()
    path = tmp_path / "app.bb"
    fm.write_frequency_vectors(path, X)
    whole = ph.SimPoint(max_k=10, seed=3).fit(X)
    chunked = ph.SimPoint(max_k=10, seed=3).fit(fm.iter_frequency_vectors(path, chunk_bytes=2048))
    assert np.array_equal(whole.labels_, chunked.labels_) and whole.bic_ == chunked.bic_


def test_pc_file_names_each_blocks_function(tmp_path):
    path = tmp_path / "app.pc"
    path.write_text("F:1:4010:main\nF:3:4100:k_xor\nF:2:4200:\n")
    assert fm.read_pc_functions(path) == {0: "main", 2: "k_xor", 1: ""}
    path.write_text("F:1:4010:main\nF:x:4100:k_xor\n")
    with pytest.raises(fm.PhaseError, match="app.pc:2"):
        fm.read_pc_functions(path)


def test_simpoint_output_formats_round_trip(tmp_path):
    X, _ = planted()
    model = ph.SimPoint(max_k=8, seed=5).fit(X)
    fm.write_simpoints(tmp_path / "s", model.simpoints_)
    fm.write_weights(tmp_path / "w", model.weights_)
    fm.write_labels(tmp_path / "l", model.labels_, model.distances_)
    assert fm.read_simpoints(tmp_path / "s") == {p: int(i) for p, i in enumerate(model.simpoints_) if i >= 0}
    weights = fm.read_weights(tmp_path / "w")
    assert weights == pytest.approx({p: w for p, w in enumerate(model.weights_) if w > 0})
    labels, dists = fm.read_labels(tmp_path / "l")
    assert np.array_equal(labels, model.labels_) and np.allclose(dists, model.distances_)
    first = (tmp_path / "s").read_text().splitlines()[0].split()
    assert first[1] == "0" and int(first[0]) == model.simpoints_[0]  # "<interval> <phase>" as SimPoint writes


def test_planted_phases_recovered_and_deterministic(tmp_path):
    X, truth = planted()
    path = tmp_path / "planted.bb"
    fm.write_frequency_vectors(path, X)
    model = ph.SimPoint(max_k=30, seed=11).fit(fm.read_frequency_vectors(path))
    assert model.k_ == 4
    assert adjusted_rand_index(truth, model.labels_) >= 0.9
    again = ph.SimPoint(max_k=30, seed=11).fit(fm.read_frequency_vectors(path))
    assert np.array_equal(again.labels_, model.labels_) and again.bic_ == model.bic_
    # each representative is a member of its phase and the nearest member to the centre
    for p, i in enumerate(model.simpoints_):
        members = np.flatnonzero(model.labels_ == p)
        assert i in members and model.distances_[i] == model.distances_[members].min()
    assert np.isclose(model.weights_.sum(), 1.0)
    assert sorted(np.round(model.weights_, 2)) == [0.1, 0.2, 0.3, 0.4]


def test_binary_search_visits_simpoint_order():
    X, _ = planted()
    model = ph.SimPoint(max_k=30, seed=11).fit(X)
    tried = list(model.bic_)
    assert {1, 30, 15} <= set(tried)            # SimPoint 3.2 starts with 1, max_k, (1 + max_k) / 2
    assert len(tried) <= int(np.log2(30)) + 3   # and stops after at most log2(max_k) + 3 runs
    best = max(model.bic_.values())
    worst = min(model.bic_.values())
    chosen = [k for k, s in model.bic_.items() if s >= worst + 0.9 * (best - worst)]
    assert model.k_ == min(chosen)


def test_variable_length_weights_follow_interval_sizes():
    X = np.array([[100, 0], [100, 0], [0, 900], [0, 900]])
    model = ph.SimPoint(max_k=2, k=2, fixed_length=False, seed=0).fit(X)
    big = model.labels_[2]
    assert model.weights_[big] == pytest.approx(0.9)
    fixed = ph.SimPoint(k=2, seed=0).fit(X)
    assert fixed.weights_[fixed.labels_[2]] == pytest.approx(0.5)
    explicit = ph.SimPoint(k=2, fixed_length=False, seed=0).fit(X, weights=[3, 3, 1, 1])
    assert explicit.weights_[explicit.labels_[0]] == pytest.approx(0.75)


def test_merge_joins_split_phases_and_keeps_distinct_ones():
    X, truth = planted(seed=3)
    split = truth.copy()
    split[(truth == 0) & (np.arange(len(truth)) % 2 == 0)] = 4   # planted phase 0 cut in two halves
    merged = merge_close_phases(X, split, threshold=0.5)
    assert merged.k_ == 4 and adjusted_rand_index(merged.labels_, truth) == 1.0
    assert merged.weights_.sum() == pytest.approx(1.0)
    sizes = X.sum(axis=1)
    for p in range(merged.k_):
        members = merged.labels_ == p
        assert merged.labels_[merged.simpoints_[p]] == p
        assert merged.weights_[p] == pytest.approx(sizes[members].sum() / sizes.sum())
        assert merged.distances_[merged.simpoints_[p]] == merged.distances_[members].min()
    # at distance 0 nothing merges; at 2 (no code in common) everything does
    assert merge_close_phases(X, split, threshold=0.0).k_ == 5
    assert merge_close_phases(X, split, threshold=2.0).k_ == 1
    with pytest.raises(fm.PhaseError, match="merge threshold"):
        merge_close_phases(X, split, threshold=-1)


def test_merge_keeps_a_very_wide_matrix_sparse():
    """5 M block columns: a dense copy of these 40 rows would take 1.6 GB."""
    rng = np.random.default_rng(0)
    rows = np.repeat(np.arange(40), 3)
    cols = np.concatenate([rng.choice(5_000_000, 3, replace=False) for _ in range(40)])
    cols[:60] = np.tile([11, 4_999_999, 123_456], 20)    # the first 20 rows run the same code
    X = sp.csr_matrix((np.ones(120), (rows, cols)), shape=(40, 5_000_000))
    merged = merge_close_phases(X, np.arange(40), threshold=0.1)
    assert merged.k_ == 21 and len(set(merged.labels_[:20])) == 1


def test_kmeans_matches_a_plain_lloyd_reference():
    """The product-form kernel against Lloyd written out with differences; an emptied centre goes to
    the origin as in SimPoint 3.2."""
    rng = np.random.default_rng(4)
    data = rng.normal(size=(300, 15))
    weights = rng.uniform(0.1, 1.0, 300)
    weights /= weights.sum()
    start = data[rng.choice(300, 6, replace=False)].copy()
    start[5] = 100.0                       # far from every row: empty after the first pass
    centers, labels, passes = ph.kmeans(data, weights, start.copy(), 100)
    ref = start.copy()
    for ref_passes in range(1, 101):
        lab = ((data[:, None, :] - ref[None]) ** 2).sum(axis=2).argmin(axis=1)
        size = np.bincount(lab, weights=weights, minlength=6)
        new = np.array([(data[lab == c] * weights[lab == c, None]).sum(axis=0) / size[c] if size[c] else np.zeros(15)
                        for c in range(6)])
        if np.allclose(new, ref, rtol=0, atol=1e-12):
            break
        ref = new
    assert np.allclose(centers, ref) and abs(passes - ref_passes) <= 1
    assert np.array_equal(labels, ((data[:, None, :] - centers[None]) ** 2).sum(axis=2).argmin(axis=1))
    assert np.abs(centers[5]).max() < 10   # restarted from the origin, not left out at 100


def loop_kernels(seed=0, kernels=3, per_kernel=120, startup=6):
    """Counts shaped as exp-bbv records compiled loop kernels in 20 k-instruction intervals: each kernel
    runs an outer-loop block, its inner loop and a tail, and where the interval boundary cuts the outer
    loop gives 2 or 3 outer iterations (most intervals one variant, a seventh the other); a few start-up
    intervals run many blocks once. Returns (counts, kernel per interval with -1 = start-up)."""
    rng = np.random.default_rng(seed)
    blocks = 3 * kernels + 200
    rows, truth = [], []
    for _ in range(startup):
        row = np.zeros(blocks)
        row[3 * kernels + rng.choice(200, 60, replace=False)] = rng.integers(5, 600, 60)
        rows.append(row)
        truth.append(-1)
    for kern in range(kernels):
        for i in range(per_kernel):
            row = np.zeros(blocks)
            row[3 * kern:3 * kern + 3] = [16, 19978, 6] if i % 7 == 3 else [24, 19967, 9]
            rows.append(row)
            truth.append(kern)
    return np.array(rows), np.array(truth)


def test_kmeans_pp_starts_each_far_group_before_a_second_in_any():
    data = np.repeat(np.eye(4) * 10, [50, 50, 50, 1], axis=0)
    data[:25, 0] += 1e-3                              # a near copy inside the first group
    weights = np.full(len(data), 1.0 / len(data))
    rng = np.random.default_rng(0)
    starts = ph.kmeans_pp(data, weights, 4, rng)
    assert sorted(np.argmax(starts, axis=1)) == [0, 1, 2, 3]      # the lone far row is a start too
    more = ph.kmeans_pp(data, weights, 8, rng)                        # more starts than distinct rows
    assert len(np.unique(more, axis=0)) == 5


def test_variance_floor_keeps_a_kernel_cut_at_its_loop_boundary_whole():
    """SimPoint's BIC on nearly noise-free loop vectors keeps rising as k-means++ separates the two
    loop-boundary variants of each kernel (and becomes unbounded at zero distortion); with the floor
    every kernel stays one phase."""
    X, truth = loop_kernels()
    kernels = truth >= 0
    for seed in range(1, 6):
        model = ph.SimPoint(max_k=30, seed=seed).fit(X)
        assert adjusted_rand_index(truth[kernels], model.labels_[kernels]) == 1.0
        bare = ph.SimPoint(max_k=30, seed=seed, variance_floor=0.0).fit(X)
        assert adjusted_rand_index(truth[kernels], bare.labels_[kernels]) < 0.95


def test_predict_assigns_new_intervals():
    X, truth = planted(seed=2)
    model = ph.SimPoint(max_k=10, seed=1).fit(X[:80])
    assert np.array_equal(model.predict(X[:80]), model.labels_)
    pred = model.predict(X[80:])
    # every phase a new interval lands in holds intervals of one planted phase only
    for p in np.unique(pred):
        assert len(set(truth[80:][pred == p]) | set(truth[:80][model.labels_ == p])) == 1


def test_adjusted_rand_index_known_values():
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    # Hubert & Arabie (1985) worked example size: ARI of these two labelings is 0.2424...
    assert adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]) == pytest.approx(0.2424, abs=1e-4)


def test_empty_and_all_zero_intervals_sit_at_the_origin(tmp_path):
    path = tmp_path / "z.bb"
    path.write_text("T:1:5 :2:1\nT\nT:1:0\n" + "T:3:4\n" * 3)
    model = ph.SimPoint(max_k=4, seed=1).fit(fm.read_frequency_vectors(path))
    assert len(model.labels_) == 6 and np.isfinite(list(model.bic_.values())).all()
    assert model.labels_[1] == model.labels_[2] != model.labels_[3]   # both at the origin


def test_bad_parameters_raise():
    with pytest.raises(fm.PhaseError):
        ph.SimPoint(k=5).fit(np.ones((3, 4)))
    with pytest.raises(fm.PhaseError):
        ph.SimPoint().fit(np.zeros((0, 4)))
    with pytest.raises(fm.PhaseError):
        ph.SimPoint(fixed_length=False).fit(np.ones((3, 4)), weights=[1, 2])
    with pytest.raises(fm.PhaseError, match="bic_threshold"):
        ph.SimPoint(bic_threshold=1.5).fit(np.ones((3, 4)))
    with pytest.raises(fm.PhaseError, match="init"):
        ph.SimPoint(init="ff").fit(np.ones((3, 4)))
    with pytest.raises(fm.PhaseError, match="variance_floor"):
        ph.SimPoint(variance_floor=-1e-4).fit(np.ones((3, 4)))


def test_tracker_finds_phases_online():
    X, truth = planted(seed=3)
    tracker = PhaseTracker(threshold=0.8)
    ids = tracker.update_many([{f"f{j}": int(c) for j, c in enumerate(row) if c} for row in X])
    assert adjusted_rand_index(truth, ids) >= 0.9
    assert len(tracker.counts_) == 4
    assert tracker.predict({"never-seen": 5}) == -1
    assert tracker.predict({"keys": [f"f{j}" for j in range(X.shape[1])], "counts": X[0].tolist()}) == ids[0]


def test_vectors_to_matrix_extends_key_table():
    X, keys = keyed.vectors_to_matrix([{"a": 1, "b": 2}, {"keys": ["c", "a"], "counts": [4, 1]}], ["z"])
    assert keys == ["z", "a", "b", "c"]
    assert sp.issparse(X) and X.toarray().tolist() == [[0, 1, 2, 0], [0, 1, 0, 4]]


def test_phases_command(tmp_path, capsys):
    X, truth = planted()
    path = tmp_path / "app.bb"
    fm.write_frequency_vectors(path, X)
    code = main(["phases", str(path), "--max-k", "30", "--seed", "11", "--json",
                 "--save-simpoints", str(tmp_path / "a.simpoints"), "--save-labels", str(tmp_path / "a.labels")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["k"] == 4 and len(out["phases"]) == 4
    assert len(fm.read_simpoints(tmp_path / "a.simpoints")) == 4
    labels, _ = fm.read_labels(tmp_path / "a.labels")
    assert adjusted_rand_index(truth, labels) >= 0.9
    assert main(["phases", str(tmp_path / "missing.bb")]) == 2
    assert main(["phases", str(path), "--variance-floor", "1"]) == 2
    assert "variance_floor must lie in [0, 1)" in capsys.readouterr().err
    # SimPoint 3.2's own starts and BIC
    assert main(["phases", str(path), "--initkm", "samp", "--variance-floor", "0", "--seed", "11", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["k"] == 4

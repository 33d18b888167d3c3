"""Tests of analytics.phases: SimPoint formats, planted-phase recovery, determinism, kernels, tracker."""

import json

import duckdb
import numpy as np
import pytest
import scipy.sparse as sp

from causewatch.analytics.phases import simpoint as ph
from causewatch.cli import main


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
    ph.write_frequency_vectors(path, X)
    back = ph.read_frequency_vectors(path)
    assert back.shape[0] == X.shape[0]
    assert np.array_equal(back.toarray(), X[:, :back.shape[1]])
    assert not X[:, back.shape[1]:].any()


def test_reads_valgrind_bb_with_comment_lines(tmp_path):
    path = tmp_path / "bb.out"
    path.write_text("T:1:10   :3:5   \nT:2:7   \n\n\n# Thread 2\n#   Total intervals: 1\nT:3:1   \n")
    X = ph.read_frequency_vectors(path)
    assert X.toarray().tolist() == [[10, 0, 5], [0, 7, 0], [0, 0, 1]]


@pytest.mark.parametrize("text", ["T:0:5\n", "T:1:x\n", "T1:5\n", "# nothing\n"])
def test_bad_frequency_vectors_raise(tmp_path, text):
    path = tmp_path / "bad.bb"
    path.write_text(text)
    with pytest.raises(ph.PhaseError):
        ph.read_frequency_vectors(path)


def test_simpoint_output_formats_round_trip(tmp_path):
    X, _ = planted()
    model = ph.SimPoint(max_k=8, seed=5).fit(X)
    ph.write_simpoints(tmp_path / "s", model.simpoints_)
    ph.write_weights(tmp_path / "w", model.weights_)
    ph.write_labels(tmp_path / "l", model.labels_, model.distances_)
    assert ph.read_simpoints(tmp_path / "s") == {p: int(i) for p, i in enumerate(model.simpoints_) if i >= 0}
    weights = ph.read_weights(tmp_path / "w")
    assert weights == pytest.approx({p: w for p, w in enumerate(model.weights_) if w > 0})
    labels, dists = ph.read_labels(tmp_path / "l")
    assert np.array_equal(labels, model.labels_) and np.allclose(dists, model.distances_)
    first = (tmp_path / "s").read_text().splitlines()[0].split()
    assert first[1] == "0" and int(first[0]) == model.simpoints_[0]  # "<interval> <phase>" as SimPoint writes


def test_planted_phases_recovered_and_deterministic(tmp_path):
    X, truth = planted()
    path = tmp_path / "planted.bb"
    ph.write_frequency_vectors(path, X)
    model = ph.SimPoint(max_k=30, seed=11).fit(ph.read_frequency_vectors(path))
    assert model.k_ == 4
    assert ph.adjusted_rand_index(truth, model.labels_) >= 0.9
    again = ph.SimPoint(max_k=30, seed=11).fit(ph.read_frequency_vectors(path))
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
    merged = ph.merge_close_phases(X, split, threshold=0.5)
    assert merged.k_ == 4 and ph.adjusted_rand_index(merged.labels_, truth) == 1.0
    assert merged.weights_.sum() == pytest.approx(1.0)
    sizes = X.sum(axis=1)
    for p in range(merged.k_):
        members = merged.labels_ == p
        assert merged.labels_[merged.simpoints_[p]] == p
        assert merged.weights_[p] == pytest.approx(sizes[members].sum() / sizes.sum())
        assert merged.distances_[merged.simpoints_[p]] == merged.distances_[members].min()
    # at distance 0 nothing merges; at 2 (no code in common) everything does
    assert ph.merge_close_phases(X, split, threshold=0.0).k_ == 5
    assert ph.merge_close_phases(X, split, threshold=2.0).k_ == 1
    with pytest.raises(ph.PhaseError, match="merge threshold"):
        ph.merge_close_phases(X, split, threshold=-1)


def test_numba_kernel_matches_python_reference():
    rng = np.random.default_rng(4)
    data = rng.normal(size=(300, 15))
    weights = rng.uniform(0.1, 1.0, 300)
    weights /= weights.sum()
    start = data[rng.choice(300, 6, replace=False)].copy()
    fast, it_fast = ph._kmeans_numba(data, weights, start, 100)
    slow, it_slow = ph._kmeans_python(data, weights, start, 100)
    assert np.allclose(fast, slow)
    assert abs(it_fast - it_slow) <= 1


def test_predict_assigns_new_intervals():
    X, truth = planted(seed=2)
    model = ph.SimPoint(max_k=10, seed=1).fit(X[:80])
    assert np.array_equal(model.predict(X[:80]), model.labels_)
    pred = model.predict(X[80:])
    # every phase a new interval lands in holds intervals of one planted phase only
    for p in np.unique(pred):
        assert len(set(truth[80:][pred == p]) | set(truth[:80][model.labels_ == p])) == 1


def test_adjusted_rand_index_known_values():
    assert ph.adjusted_rand_index([0, 0, 1, 1], [5, 5, 7, 7]) == 1.0
    # Hubert & Arabie (1985) worked example size: ARI of these two labelings is 0.2424...
    assert ph.adjusted_rand_index([0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 2, 2]) == pytest.approx(0.2424, abs=1e-4)


def test_bad_parameters_raise():
    with pytest.raises(ph.PhaseError):
        ph.SimPoint(k=5).fit(np.ones((3, 4)))
    with pytest.raises(ph.PhaseError):
        ph.SimPoint().fit(np.zeros((0, 4)))
    with pytest.raises(ph.PhaseError):
        ph.SimPoint(fixed_length=False).fit(np.ones((3, 4)), weights=[1, 2])
    with pytest.raises(ph.PhaseError, match="bic_threshold"):
        ph.SimPoint(bic_threshold=1.5).fit(np.ones((3, 4)))


def test_tracker_finds_phases_online():
    X, truth = planted(seed=3)
    tracker = ph.PhaseTracker(threshold=0.8)
    ids = tracker.update_many([{f"f{j}": int(c) for j, c in enumerate(row) if c} for row in X])
    assert ph.adjusted_rand_index(truth, ids) >= 0.9
    assert len(tracker.counts_) == 4
    assert tracker.predict({"never-seen": 5}) == -1
    assert tracker.predict({"keys": [f"f{j}" for j in range(X.shape[1])], "counts": X[0].tolist()}) == ids[0]


def test_bbv_matrix_from_duckdb(tmp_path):
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    con.execute("CREATE TABLE bbv(node VARCHAR, boot VARCHAR, seq BIGINT, target VARCHAR, kind VARCHAR, "
                "t_start DOUBLE, t_end DOUBLE, key VARCHAR, count BIGINT)")
    con.execute("INSERT INTO bbv (node, boot, seq, target, kind, t_start, t_end, key, count) "
                "VALUES ('n1','b',1,'app','native',0,1,'f',3), ('n1','b',1,'app','native',0,1,'g',1),"
                "('n1','b',2,'app','native',1,2,'g',5), ('n2','c',1,'other','python',0,1,'h',2)")
    X, keys, index = ph.bbv_matrix(con, "target = ?", ["app"])
    assert X.shape == (2, 2) and keys == ["f", "g"]
    assert X.toarray().tolist() == [[3, 1], [0, 5]]
    assert index[1][:3] == ("n1", "b", 2)


def test_vectors_to_matrix_extends_key_table():
    X, keys = ph.vectors_to_matrix([{"a": 1, "b": 2}, {"keys": ["c", "a"], "counts": [4, 1]}], ["z"])
    assert keys == ["z", "a", "b", "c"]
    assert sp.issparse(X) and X.toarray().tolist() == [[0, 1, 2, 0], [0, 1, 0, 4]]


def test_phases_command(tmp_path, capsys):
    X, truth = planted()
    path = tmp_path / "app.bb"
    ph.write_frequency_vectors(path, X)
    code = main(["phases", str(path), "--max-k", "30", "--seed", "11", "--json",
                 "--save-simpoints", str(tmp_path / "a.simpoints"), "--save-labels", str(tmp_path / "a.labels")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["k"] == 4 and len(out["phases"]) == 4
    assert len(ph.read_simpoints(tmp_path / "a.simpoints")) == 4
    labels, _ = ph.read_labels(tmp_path / "a.labels")
    assert ph.adjusted_rand_index(truth, labels) >= 0.9
    assert main(["phases", str(tmp_path / "missing.bb")]) == 2


def test_phases_command_reads_a_duckdb_store(tmp_path, capsys):
    db = str(tmp_path / "s.duckdb")
    con = duckdb.connect(db)
    con.execute("CREATE TABLE bbv(node VARCHAR, boot VARCHAR, seq BIGINT, target VARCHAR, kind VARCHAR, "
                "t_start DOUBLE, t_end DOUBLE, key VARCHAR, count BIGINT)")
    rows = [("n", "b", i, "app", "native", float(i), i + 1.0, key, 10 + i % 3)
            for i in range(12) for key in (("f", "g") if i % 2 else ("h", "k"))]
    con.executemany("INSERT INTO bbv (node, boot, seq, target, kind, t_start, t_end, key, count) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.close()
    assert main(["phases", db, "--target", "app", "--k", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["intervals"] == 12 and out["k"] == 2
    assert sorted(p["intervals"] for p in out["phases"]) == [6, 6]
    assert main(["phases", db, "--target", "none"]) == 2

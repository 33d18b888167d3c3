"""Tests of causewatch.analytics.causal.kde_null: the shipped null table agrees with a fresh simulation, covers
what it claims, is skipped when stale, and the runtime simulation fills in the rest."""

import tomllib

import pytest

from causewatch.analytics.causal import entropy, kde_null

CONT = ((0,), (0,), ())


@pytest.mark.parametrize("shape", [CONT, ((0,), (0,), (0, 0))])
def test_a_table_entry_agrees_with_a_fresh_simulation(shape):
    assert (64, shape) in kde_null.table()
    fresh = kde_null.simulate(64, shape, kde_null.TABLE_DRAWS, kde_null.SEED, kde_null.POINTS)
    assert kde_null.table()[(64, shape)] == pytest.approx(fresh, rel=1e-6)


def test_the_table_covers_its_shapes_and_sizes_without_simulating(monkeypatch):
    def refuse(*args):
        raise AssertionError(f"simulated {args}")
    monkeypatch.setattr(kde_null, "simulate", refuse)
    for shape in kde_null.table_shapes():
        for n in kde_null.table_sizes():
            assert (n, shape) in kde_null.table()
        mean, sd = kde_null.null_moments(1000, shape)
        assert sd > 0


def test_other_shapes_and_parameters_are_simulated_once(monkeypatch):
    calls = []
    real = kde_null.simulate

    def counting(*args):
        calls.append(args)
        return real(*args)
    monkeypatch.setattr(kde_null, "simulate", counting)
    monkeypatch.setattr(kde_null, "_CACHE", {})
    shape = ((0,), (3,), ())  # a discrete y: not in the table
    first = kde_null.null_at(64, shape, n_null=8)
    assert kde_null.null_at(64, shape, n_null=8) == first
    kde_null.null_at(64, CONT, n_null=8)  # a table shape with fewer draws than the table's: the table
    kde_null.null_at(64, CONT, n_null=8, points=32)  # a table shape, but not the table's points
    assert [c[:3] + c[4:] for c in calls] == [(64, shape, 8, kde_null.POINTS), (64, CONT, 8, 32)]


def test_a_table_made_for_another_bandwidth_is_ignored(tmp_path, monkeypatch):
    stale = tmp_path / "kde_null.toml"
    stale.write_text(kde_null.TABLE.read_text().replace(
        f"bandwidth_scale = {entropy.KDE_BANDWIDTH_SCALE!r}", "bandwidth_scale = 1.0"))
    monkeypatch.setattr(kde_null, "TABLE", stale)
    kde_null.table.cache_clear()
    try:
        assert kde_null.table() == {}
    finally:
        monkeypatch.undo()
        kde_null.table.cache_clear()
    assert kde_null.table()


def test_render_is_deterministic_and_parses_back():
    text = kde_null.render([CONT], [64, 76])
    assert text == kde_null.render([CONT], [64, 76])
    entry = tomllib.loads(text)["null"][kde_null.shape_key(CONT)]
    assert entry["n"] == [64, 76]
    assert (entry["mean"][0], entry["sd"][0]) == pytest.approx(kde_null.table()[(64, CONT)], rel=1e-6)


def test_grid_sizes_are_quarter_octaves():
    sizes = kde_null.table_sizes()
    assert sizes[0] == 64 and sizes[-1] == 16384 and len(sizes) == 33
    lo, hi, w = kde_null.grid(1000)
    assert (lo, hi) == (861, 1024) and 0 < w < 1

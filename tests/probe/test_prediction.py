"""Prediction intervals of probe predictions: the floor, the delta method for P, and their coverage."""

import math

import numpy as np
import pytest

from causewatch.probe.prediction import pooled_ratio, prediction_interval, ratio_se2, relative_se2


def test_without_noise_the_interval_is_the_floor():
    lo, hi = prediction_interval(10.0, 0.0, 0.0, 3, 0.05)
    assert lo == pytest.approx(10.0 / 1.05) and hi == pytest.approx(10.5)


def test_run_spread_uses_students_t_of_the_reference_runs():
    lo, hi = prediction_interval(10.0, 0.0, 0.10, 3, 0.0)
    half = 4.302653 * 0.10 * math.sqrt(1 + 1 / 3)   # t(0.975, 2 df)
    assert math.log(hi / 10.0) == pytest.approx(half, rel=1e-5) and lo * hi == pytest.approx(100.0)
    assert prediction_interval(10.0, 0.0, 0.10, 1, 0.0) == pytest.approx((10.0, 10.0))  # one run: no spread known


def test_ratio_se2_weights_each_phase_by_its_share_of_p():
    assert relative_se2(2.0, 0.2, 4) == pytest.approx(0.0025) and relative_se2(0.0, 1.0, 3) == 0.0
    assert ratio_se2([1.0], [1.3], [0.01]) == pytest.approx(0.01)
    # two equal independent halves: the relative variance of their sum is half of each one's
    assert ratio_se2([0.5, 0.5], [1.0, 1.0], [0.01, 0.01]) == pytest.approx(0.005)
    # a phase with a negligible share of P adds almost nothing
    assert ratio_se2([0.99, 0.01], [1.0, 1.0], [0.0, 1.0]) == pytest.approx(1e-4)


def test_intervals_cover_about_95_percent_of_simulated_runs():
    """Log-normal timings with known noise: reference runs, probe repeats here and there, one new run."""
    rng = np.random.default_rng(7)
    runs, repeats, run_sd, rep_sd, true_ratio = 3, 5, 0.06, 0.03, 1.7
    inside = 0
    trials = 4000
    for _ in range(trials):
        ref_runs = 100.0 * np.exp(rng.normal(0, run_sd, runs))
        ref_rep = np.exp(rng.normal(0, rep_sd, repeats))
        here_rep = true_ratio * np.exp(rng.normal(0, rep_sd, repeats))
        new_run = 100.0 * true_ratio * math.exp(rng.normal(0, run_sd))
        ratio = here_rep.mean() / ref_rep.mean()
        se2 = relative_se2(here_rep.mean(), here_rep.std(ddof=1), repeats) + \
            relative_se2(ref_rep.mean(), ref_rep.std(ddof=1), repeats)
        lo, hi = prediction_interval(ref_runs.mean() * ratio, se2, ref_runs.std(ddof=1) / ref_runs.mean(), runs, 0.0)
        inside += lo <= new_run <= hi
    assert 0.92 <= inside / trials <= 0.99


def test_pooled_ratio_and_its_error():
    assert pooled_ratio([2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == pytest.approx((2.0, 0.0))
    r, se2 = pooled_ratio([3.0, 2.0], [1.0, 1.0])
    # blocks 3 and 2 around R = 2.5: sum (y - R x)^2 / (n (n-1) (x_bar R)^2) = 0.5 / (2 * 6.25)
    assert r == pytest.approx(2.5) and se2 == pytest.approx(0.04)
    assert pooled_ratio([5.0], [2.0]) == (2.5, 0.0)
    with pytest.raises(ValueError):
        pooled_ratio([], [])


def _quota_walls(cpu_times, offset, budget=0.05, period=0.1):
    """Wall seconds of tasks run back to back under a CFS quota of `budget` CPU seconds per `period`,
    starting `offset` CPU seconds into a period's budget: the process runs from each period's start
    until the budget is spent, then waits for the next period."""
    marks = offset + np.concatenate([[0.0], np.cumsum(cpu_times)])
    wall = np.floor(marks / budget) * period + np.mod(marks, budget)
    return np.diff(wall)


def test_pooled_stretch_sees_a_quota_that_single_timings_miss():
    """Simulated 50 % quota, 100 ms period: 40 ms tasks are either throttled or not, so a phase's block
    of 4 timings strays far from 2x; the pooled wall per CPU second over adjacent blocks does not, and
    its 95 % interval holds the truth at least that often."""
    rng = np.random.default_rng(3)
    pooled, per_block, inside = [], [], 0
    for _ in range(200):
        cpu = rng.uniform(0.03, 0.05, size=20)
        wall = _quota_walls(cpu, offset=rng.uniform(0, 0.05))
        ys, xs = wall.reshape(5, 4).sum(axis=1), cpu.reshape(5, 4).sum(axis=1)
        r, se2 = pooled_ratio(ys, xs)
        pooled.append(r)
        per_block.extend(ys / xs)
        inside += abs(r - 2.0) <= 1.96 * r * np.sqrt(se2)
    assert np.max(np.abs(np.array(pooled) - 2.0)) < 0.1 < 0.2 < np.max(np.abs(np.array(per_block) - 2.0))
    assert inside >= 0.95 * 200

"""An information equivalence (Lemeire et al. §6.2) needs a decisive dependence (a chance rejection
at alpha must not keep the edge of a variable that is independent of everything) and a deterministic
relation between the two candidates."""

import numpy as np
import pandas as pd
import pytest

from causewatch.analytics.causal import pc
from causewatch.analytics.causal.ci import CIResult, CITest


class ScriptedTest(CITest):
    """a and b strongly dependent; t weakly (by chance) dependent on each alone, independent given
    the other -- the pattern of linear-10v seed 9 in bench/causal.py."""

    name = "scripted"

    def __init__(self, t_margin):
        super().__init__()
        self.t_margin = t_margin

    def _compute(self, data, x, y, z):
        pair = {x, y}
        if pair == {"a", "b"}:
            return self._result(50.0)
        if "t" in pair and not z:
            return self._result(self.t_margin)
        return self._result(-5.0)

    @staticmethod
    def _result(margin):
        return CIResult(margin, 0.0, margin <= 0, max(margin, 0.0), margin)


@pytest.mark.parametrize("t_margin,noise,equivalent", [(0.4, 0.0, False), (pc.EQUIVALENCE_MARGIN + 10, 0.0, True),
                                                      (pc.EQUIVALENCE_MARGIN + 10, 0.5, False)])
def test_an_equivalence_needs_a_decisive_dependence_and_a_deterministic_relation(t_margin, noise, equivalent):
    rng = np.random.default_rng(0)
    a = rng.normal(size=200)
    df = pd.DataFrame({"a": a, "b": a ** 3 + noise * rng.normal(size=200) * a.std() ** 3, "t": rng.normal(size=200)})
    learner = pc.PCLearner(ci_test=ScriptedTest(t_margin), max_depth=2).fit(df)
    assert bool(learner.equivalences_) == equivalent
    t_edges = [e for e in learner.model_.edges() if "t" in (e.src, e.dst)]
    assert len(t_edges) == (1 if equivalent else 0)

"""The papers' own examples learnt as the papers describe them (Lemeire et al., *Causal analysis for
performance modeling of computer programs*: Fig. 1, and the LU-decomposition model of Fig. 4 / Fig. 9
with its information equivalences resolved by the complexity criterion, §6.2 and Eq. 15)."""

import pytest

from causewatch.analytics.causal import papers
from causewatch.analytics.causal.pc import PCLearner


def _arcs(model):
    return {(e.src, e.dst) for e in model.edges() if e.directed}


def test_fig1_is_learnt_with_its_v_structure():
    # Lemeire et al., Fig. 1: A -> B <- D, B -> C; A ⊥ D, A ⊥ C | B, D ⊥ C | B. The default learner
    # on 1000 rows of the nonlinear version finds exactly this DAG (the v-structure orients all
    # edges) on at least 9 of 10 data sets: each of its 4 independences is tested at alpha = 0.01,
    # so about one data set in 25 may show a false dependence (seed 0 does: D – C, p = 0.005).
    exact = 0
    for seed in range(10):
        ex = papers.fig1(n=1000, seed=seed)
        model = PCLearner().fit(ex.df).model_
        exact += {(e.src, e.dst, e.directed) for e in model.edges()} == {(a, b, True) for a, b in ex.dag.edges}
    assert exact >= 9


def test_lu_model_keeps_ops_for_t_comp_and_finds_the_cycle_relations():
    # Lemeire et al., LU decomposition (Fig. 4, Fig. 9): n and #op are information equivalent for
    # T_comp (ops is a function of n); the complexity criterion keeps T_comp = ops·C_op/f, the
    # simpler relation, not n. L2M_op -> C_op and instr_op -> C_op are found (C_op is not the cause
    # of instr_op), and no edge joins n and T_comp. With the papers' tiers as background.
    ex = papers.lu(n=1000, seed=0, noise=0.05)
    learner = PCLearner(background=ex.background, discrete=ex.discrete).fit(ex.df)
    model = learner.model_
    t_comp = [q for q in model.equivalences if q["target"] == "t_comp" and q["variables"] == ["n", "ops"]]
    assert [q["kept"] for q in t_comp] == ["ops"]
    assert t_comp[0]["bits"]["ops"] < t_comp[0]["bits"]["n"]
    arcs = _arcs(model)
    assert {("ops", "t_comp"), ("l2m_op", "c_op"), ("instr_op", "c_op"), ("n", "ops")} <= arcs
    assert ("c_op", "instr_op") not in arcs
    assert not any({e.src, e.dst} == {"n", "t_comp"} for e in model.edges())


@pytest.mark.slow   # a learn per seed
def test_lu_model_over_seeds_keeps_the_simpler_relation_and_finds_c_op_to_t_comp():
    # The same model on six data sets at each of three noise levels: the complexity criterion keeps
    # ops for t_comp on every one, no n – t_comp edge and no c_op -> instr_op, and no adjacency the
    # model lacks. c_op -> t_comp is faint (t_comp spans six orders of magnitude, c_op a factor of
    # four; given c_op's parents only c_op's own noise is left): found on 7 of 18 (2 at noise 0.05),
    # where causal-learn's KCI does not reject c_op ⊥ t_comp | c_op's parents at 0.01 on any of the
    # six at 0.05 (bench/lu_edge.py) and the KDE test finds it on none. RCoT found it on 15 of 18
    # before z's level interactions, partly through the leak that also made false edges (16 on these
    # 18: docs/causal-measured.md, "Level interactions in z").
    found = false = 0
    for noise in (0.02, 0.05, 0.1):
        for seed in range(6):
            ex = papers.lu(n=1000, seed=seed, noise=noise)
            model = PCLearner(background=ex.background, discrete=ex.discrete).fit(ex.df).model_
            arcs = _arcs(model)
            assert [q["kept"] for q in model.equivalences if q["target"] == "t_comp"] == ["ops"]
            assert not any({e.src, e.dst} == {"n", "t_comp"} for e in model.edges())
            assert ("c_op", "instr_op") not in arcs
            found += ("c_op", "t_comp") in arcs
            false += sum(not ex.dag.has_edge(e.src, e.dst) and not ex.dag.has_edge(e.dst, e.src) for e in model.edges())
    assert found >= 5
    assert false <= 1

"""Causal structure learning after Lemeire et al.: KDE mutual information, CI tests, PC-stable, MDL.

DataFrames in, models out. Every name below imports from here (`from causewatch.analytics.causal import
PCLearner`), loaded from its module on first use.

Learning
    PCLearner — PC-stable structure learning with information equivalences (fit, partial_fit, model_)
    PCError — bad learner parameters or data
    Background — what the expert knows before learning: tiers, forbidden and required edges
    BackgroundError — background knowledge that names unknown variables or contradicts itself

Models
    CausalModel — the learned CPDAG: strengths, sepsets, submodels, Markov violations, diff, JSON
    Edge — one edge of a model: src, dst, directed, strength
    ModelError — a model operation on data that does not fit it
    model_svg — a model's graph as SVG, edge width by strength, anomalous edges in red

Diffs
    diff_windows — learn a model of each of two windows and say what changed between them
    diff_models — what changed between two models (and, given their rows, their mechanisms)
    CausalDiff — the changes: edges added, removed, re-oriented, strengths moved, mechanisms changed (to_dict)
    EdgeChange — one edge of a diff: added, removed, re-oriented or its strength moved (its edge in each model)
    MechanismChange — one variable of a diff whose mechanism changed (its causes, the test, the fit in each window)
    DiffError — two windows that cannot be compared
    diff_svg — a diff as SVG: the newer model with each change marked, and a legend

Conditional independence tests
    AutoTest — the default: per data set, the test that won bench/causal.py for its kind
    KDEMITest — conditional MI on kernel density estimates against a calibrated null
    RCoTTest — the randomized conditional correlation test
    FisherZTest — partial correlation with Fisher's z (the linear-Gaussian baseline)
    GSquareTest — the G² likelihood-ratio test on counts
    DSeparationOracle — the answers a faithful distribution of a DAG would give (for tests of a learner)
    oracle_dataset — the empty table the oracle takes as data
    make_ci_test — a test by name: auto, kde, lemeire, rcot, fisher-z, g2
    CITest — the tests' base: caching per data version, the count of tests computed
    CIResult — one test's statistic, threshold, verdict, bits and margin
    Dataset — the table the tests read: float columns, discrete flags, a content hash
    DEFAULT_ALPHA — the tests' significance level unless one is given
    CIError — bad input to a test: an unknown column, a bad parameter

Minimum description length
    fit_curve — the curve y = f(x) of least description length among the function classes
    fit_submodel — MDL regression of a variable on its parents
    relation_bits — description length of target = f(variables), how the learner weighs a relation
    Fit — one fitted hypothesis and its description length
    Submodel — a variable as a function of its parents, and its bits
    MDLError — bad input to a curve fit

Submodules
    entropy — entropy, mutual information and conditional MI of mixed columns (KDE, Lemeire's estimator)
    baseline — which model version becomes a scope's baseline (choose: the majority rule, robust to one flickering edge)
    anomalies — where newer rows or a newer model depart from a baseline model (KINDS, edge_changes, …)
    features — stored rows to a model's variables (name_task_columns, with_code_phase, model_variables)
    papers — the papers' example models as data generators with their true graphs (fig1, lu)

The other modules are internal: pc, background, model, drawing, diff, diff_drawing, ci, mdl (their public
names are above), kde_null (the KDE test's null table), gaussian (Mardia's tests), gsquare (G² counting),
rcot (RCoT's kernels).
"""

from causewatch.analytics._lazy import attach

__getattr__, __dir__, __all__ = attach(__name__, {
    "PCLearner": "pc", "PCError": "pc",
    "Background": "background", "BackgroundError": "background",
    "CausalModel": "model", "Edge": "model", "ModelError": "model",
    "model_svg": "drawing",
    "diff_windows": "diff", "diff_models": "diff", "CausalDiff": "diff", "EdgeChange": "diff",
    "MechanismChange": "diff", "DiffError": "diff", "diff_svg": "diff_drawing",
    "AutoTest": "ci", "KDEMITest": "ci", "RCoTTest": "ci", "FisherZTest": "ci", "GSquareTest": "ci",
    "DSeparationOracle": "ci", "oracle_dataset": "ci", "make_ci_test": "ci", "CITest": "ci", "CIResult": "ci",
    "Dataset": "ci", "DEFAULT_ALPHA": "ci", "CIError": "ci",
    "fit_curve": "mdl", "fit_submodel": "mdl", "relation_bits": "mdl", "Fit": "mdl", "Submodel": "mdl",
    "MDLError": "mdl",
    "entropy": "entropy", "anomalies": "anomalies", "baseline": "baseline", "features": "features", "papers": "papers",
})

"""Causal structure learning after Lemeire et al.: KDE mutual information, CI tests, PC-stable, MDL.

Modules: entropy (estimators), kde_null (their null distribution), ci (tests), background, pc
(the learner), model (CausalModel), mdl (submodels), features (store rows -> model variables).
"""

"""causewatch.analytics: four libraries usable offline on a CSV, each a sub-package.

causal (entropy/MI, PC learner, MDL), fuzzy (scores, bottlenecks, PERFQL), phases (SimPoint, tracker),
rca (root-cause ranking of a baseline and an incident window).
They take DataFrames and matrices, never a store connection, and import nothing else of causewatch. Each
re-exports the public names its docstring lists (`from causewatch.analytics.fuzzy import Membership`),
loaded from their modules on first use (_lazy).
"""

"""causewatch.analytics: three libraries usable offline on a CSV, each a sub-package.

causal (entropy/MI, PC learner, MDL), fuzzy (scores, bottlenecks, PERFQL), phases (SimPoint, tracker).
They take frames and matrices, never a store connection, and import nothing else of causewatch.
"""

"""causewatch.analytics: entropy/MI, PC learner, MDL, fuzzy scores, PERFQL, phases.

A library usable offline; it imports nothing else of causewatch.
"""

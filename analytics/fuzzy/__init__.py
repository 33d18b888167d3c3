"""Soft performance analysis after Truong & Fahringer: membership functions, hedges, linguistic
expressions, term sets, the performance score and bottleneck search (score), and PERFQL."""

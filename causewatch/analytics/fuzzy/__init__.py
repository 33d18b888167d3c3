"""Soft performance analysis after Truong & Fahringer: membership functions, hedges, linguistic
expressions, term sets, the performance score, bottleneck search, and PERFQL.

Every name below imports from here (`from causewatch.analytics.fuzzy import Membership`), loaded from
its module on first use: the store's readers import summaries without the membership kernels (numba).

Membership functions
    Membership — one fuzzy set: a shape and its parameters, evaluated in either mode
    PointSet — a FuzzyJ fuzzy set: points joined by lines, flat beyond the ends
    MODES — the two algebras: exact curves and FuzzyJ-compatible point lists
    MembershipError — a fuzzy set given wrong parameters

Hedges and linguistic expressions
    HEDGES — the hedges an expression may use (very, somewhat, not, …)
    intensify — Zadeh's contrast intensification of membership degrees
    parse — a linguistic expression such as 'very low or medium' as a tree
    degrees — membership of values in a linguistic expression over a term set
    ExpressionError — a malformed or unresolvable expression, with its column

Term sets
    TermSet — a metric's terms, its expression and its bottleneck specification
    Bottleneck — a crisp threshold plus fuzzy severity terms and a negligible band
    TermLearner — terms learnt per metric from observed values (a Ruspini partition)
    load_terms — the default term sets, with those of a TOML file added or replacing
    default_terms — the term sets shipped in default_terms.toml
    parse_terms — term sets from TOML text
    dump_terms — term sets as TOML text that parse_terms reads back
    TermsError — a bad term-set definition, naming its TOML key

Scores and similarity
    BASES — what a value is scored against: parent, program, cluster, max
    base_values — V of Eq. 1 for every row of a region-summary DataFrame
    performance_score — Eq. 1: a value's score against its base
    owa — Eq. 2: the weighted average of several scores
    classify — the degree of every value in every term
    similarity — Eq. 3: similarity of two score vectors
    similarity_to_base — similarity of every row of a score matrix to one base row

Bottlenecks
    bottleneck_search — Fig. 4: bottleneck degrees of values against one Bottleneck
    format_degrees — degrees as the paper's figures print them
    find_bottlenecks — the bottleneck search over a region-summary DataFrame, every term set with a bottleneck
    summarise_bottlenecks — one row per region and metric: value, severity, degrees

PERFQL
    Query — a parsed PERFQL statement bound to term sets, evaluated on a region-summary DataFrame
    PerfQLError — a malformed statement (the ExpressionError class)

Submodules
    perfql — the PERFQL language: its grammar, parser and Query
    summaries — the region-summary DataFrame: KEYS, BASE_METRICS, metric_name, records (pandas only)

The other modules are internal: hedges, linguistic, membership, terms, score, bottlenecks (their public
names are above).
"""

from causewatch.analytics._lazy import attach

__getattr__, __dir__, __all__ = attach(__name__, {
    "Membership": "membership", "PointSet": "membership", "MODES": "membership", "MembershipError": "membership",
    "HEDGES": "hedges", "intensify": "hedges",
    "parse": "linguistic", "degrees": "linguistic", "ExpressionError": "linguistic",
    "TermSet": "terms", "Bottleneck": "terms", "TermLearner": "terms", "load_terms": "terms",
    "default_terms": "terms", "parse_terms": "terms", "dump_terms": "terms", "TermsError": "terms",
    "BASES": "score", "base_values": "score", "performance_score": "score", "owa": "score", "classify": "score",
    "similarity": "score", "similarity_to_base": "score", "bottleneck_search": "score", "format_degrees": "score",
    "find_bottlenecks": "bottlenecks", "summarise_bottlenecks": "bottlenecks",
    "Query": "perfql", "PerfQLError": "perfql",
    "perfql": "perfql", "summaries": "summaries",
})

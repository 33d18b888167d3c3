"""Program phases: SimPoint 3.2's clustering of basic block vectors and its file formats, the merge of
close phases, the online tracker, and the adjusted Rand index that compares labelings.

Every name below imports from here (`from causewatch.analytics.phases import SimPoint`), loaded from its
module on first use: the tracker alone loads numpy, not scipy.

Clustering
    SimPoint — SimPoint 3.2's phase clustering as a scikit-learn style estimator
    merge_close_phases — join phases whose centroids lie within a threshold (single linkage)
    MergedPhases — the phases after merging: labels, simpoints, weights, distances
    adjusted_rand_index — agreement of two labelings of the same intervals (1 = identical partitions)

What each phase does
    phase_centroids — each phase's mean normalised vector over the original keys, not the projection
    top_keys — each phase's largest keys (blocks, or functions by name) with their share of it
    phase_mix — the phases of vectors in their long form, heaviest first, each with its weight, intervals, top keys

Online
    PhaseTracker — phase ids for a live stream of sparse vectors, a new phase when none is near

Vectors
    vectors_to_matrix — string-keyed sparse vectors ({key: count}) stacked into one CSR matrix
    normalise_rows — each row divided by its sum, as SimPoint does before projecting

SimPoint 3.2's files
    read_frequency_vectors — a .bb (or .bb.gz) file as one counts matrix
    iter_frequency_vectors — a .bb (or .bb.gz) file's intervals in chunks
    write_frequency_vectors — a counts matrix as a .bb file
    read_labels — (labels, distances) from a labels file
    write_labels — each interval's phase and distance to its centre
    read_simpoints — {phase: interval} from a .simpoints file
    write_simpoints — each non-empty phase's simulation point
    read_weights — {phase: weight} from a .weights file
    write_weights — each non-empty phase's weight
    read_pc_functions — {column: function name} from an exp-bbv pc file
    CountRows — an intervals × blocks counts matrix as CSR parts (what the readers return)
    PhaseError — bad input: a malformed vector file, an empty matrix, a bad parameter

Submodules
    formats — the file formats above as one namespace (formats.write_labels, …)

The other modules are internal: simpoint, merge, tracker, keyed, centroids, mix, ari (their public names are above).
"""

from causewatch.analytics._lazy import attach

__getattr__, __dir__, __all__ = attach(__name__, {
    "SimPoint": "simpoint",
    "merge_close_phases": "merge", "MergedPhases": "merge",
    "adjusted_rand_index": "ari",
    "phase_centroids": "centroids", "top_keys": "centroids", "phase_mix": "mix",
    "PhaseTracker": "tracker",
    "vectors_to_matrix": "keyed", "normalise_rows": "keyed",
    "read_frequency_vectors": "formats", "iter_frequency_vectors": "formats", "write_frequency_vectors": "formats",
    "read_labels": "formats", "write_labels": "formats", "read_simpoints": "formats", "write_simpoints": "formats",
    "read_weights": "formats", "write_weights": "formats", "read_pc_functions": "formats", "CountRows": "formats",
    "PhaseError": "formats",
    "formats": "formats",
})

"""Phase vectors read back from a real DuckDB store: one target's vectors of one kind, as a matrix."""

from support import bbv_frames

from causewatch.analytics.phases.keyed import bbv_matrix
from causewatch.daemon.readers.phases import bbv_rows
from causewatch.daemon.store import Store


def test_bbv_rows_of_one_target_and_kind_as_a_matrix(tmp_path):
    store = Store(str(tmp_path / "s.duckdb"))
    store.commit_frames(bbv_frames([("n1", "b", 1, "app", "native", 0, 1, "f", 3),
                                    ("n1", "b", 1, "app", "native", 0, 1, "g", 1),
                                    ("n1", "b", 2, "app", "native", 1, 2, "g", 5),
                                    ("n2", "c", 1, "other", "python", 0, 1, "h", 2),
                                    ("n1", "b", 3, "app", "python", 2, 3, "x", 1)]))
    con = store.con
    X, keys, index = bbv_matrix(bbv_rows(con, "app", "native"))
    assert X.shape == (2, 2) and keys == ["f", "g"]
    assert X.toarray().tolist() == [[3, 1], [0, 5]]
    assert index[1][:3] == ("n1", "b", 2)
    assert bbv_matrix(bbv_rows(con, "app", "nope"))[0].shape[0] == 0
    store.close()

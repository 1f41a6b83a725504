"""How a state stores rows (state.py, bags.py), seen through its public methods: a
retraction of a row never stored is kept and counted as an anomaly, never shown, and
cancelled by a later insert; a key index stores its one bag directly but shows a
checkpoint the same {index key: bag} contents as any other state. JVM-free."""

from __future__ import annotations

from stepped import Harness, assert_exact

VIEW = "SELECT k, v FROM t WHERE k = ?"


def _reader():
    h = Harness()
    h.table("t", [("k", "BIGINT"), ("v", "BIGINT")], [(1, 10), (1, 11), (2, 20)])
    h.view("v", VIEW)
    assert_exact(h, "v", [(1,), (2,)], h.lookup("v", [(1,), (2,)]))
    return h, h.df.reader("v").state


def test_a_retraction_of_a_row_never_stored_is_an_anomaly_kept_until_cancelled() -> None:
    h, st = _reader()
    assert st.flat  # the reader is keyed by exactly its partial column
    st.apply_rows(st.bucket((1,)), (1,), [((1, 99), -1)])
    assert st.anomalies == 1
    assert sorted(st.bucket_rows((1,))) == [(1, 10), (1, 11)]  # a count below 1 is not shown
    st.apply_rows(st.bucket((1,)), (1,), [((1, 99), 1)])
    assert sorted(st.bucket_rows((1,))) == [(1, 10), (1, 11)]
    assert st.index_entries((1,), [(1,)]) == [((1,), {(1, 10): 1, (1, 11): 1})]
    assert st.anomalies == 1
    assert not [p for p in h.check_states() if "anomal" not in p]


def test_a_key_index_shows_checkpoints_its_bag_by_index_key() -> None:
    h, st = _reader()
    assert st.index_keys((2,)) == [(2,)]
    assert st.index_entries((2,), [(2,), (3,)]) == [((2,), {(2, 20): 1}), ((3,), None)]
    h.model.write("t", deletes=[(2, 20)])
    h.run()
    assert st.is_filled((2,))  # filled and empty, not a hole
    assert st.index_keys((2,)) == []
    assert st.index_entries((2,), [(2,)]) == [((2,), None)]
    assert_exact(h, "v", [(2,)], h.lookup("v", [(2,)]))

"""A lookup key's values must fit the view's parameter types (the rules storage applies to
writes); a mismatch is refused with InvalidArgument naming the view, the parameter and the
value, before anything is queued or any Spark job runs. NULL stays allowed (it answers
empty, as ``col = NULL`` is never true)."""

from __future__ import annotations

import re

import pytest

from partialflow.client import InvalidArgument


def test_lookup_key_of_the_wrong_type_is_refused_before_any_work(server, uniq):
    t, view = f"{uniq}t", f"{uniq}v"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, category TEXT, x DOUBLE, flag BOOLEAN)")
        c.insert(t, [(1, "a", 0.5, True), (2, "b", 1.5, False)])
        c.execute(f"CREATE VIEW {view} AS SELECT k, x FROM {t} WHERE k = ? AND category = ?")
        before = c.stats()
        with pytest.raises(
            InvalidArgument,
            match=re.escape(f"view '{view}' parameter 2 (category) is TEXT, got 5 (int)"),
        ):
            c.lookup(view, (1, 5))
        with pytest.raises(
            InvalidArgument, match=re.escape("parameter 1 (k) is BIGINT, got 'x' (str)")
        ):
            c.lookup(view, ("x", "a"))
        with pytest.raises(
            InvalidArgument, match=re.escape("parameter 1 (k) is BIGINT, got 1.5 (float)")
        ):
            c.lookup(view, (1.5, "a"))
        # One bad key refuses the whole batch.
        with pytest.raises(
            InvalidArgument, match=re.escape("parameter 1 (k) is BIGINT, got True (bool)")
        ):
            c.lookup_many(view, [(1, "a"), (True, "a")])
        after = c.stats()
        assert after["spark_jobs"] == before["spark_jobs"]
        assert after["views"][view]["misses"] == before["views"][view]["misses"] == 0
        # NULL answers empty; good keys answer as usual.
        assert c.lookup(view, (None, "a")).rows == []
        assert c.lookup(view, (1, "a")).rows == [(1, 0.5)]


def test_parameter_types_follow_views_over_views_and_allow_ints_for_doubles(server, uniq):
    t = f"{uniq}t"
    with server.client() as c:
        c.execute(f"CREATE TABLE {t} (k BIGINT, x DOUBLE, flag BOOLEAN)")
        c.insert(t, [(1, 2.0, True), (2, 3.0, True), (3, 2.0, False)])
        c.execute(
            f"CREATE VIEW {uniq}inner AS SELECT x, flag, COUNT(*) AS n FROM {t} GROUP BY x, flag"
        )
        c.execute(
            f"CREATE VIEW {uniq}outer AS SELECT x, n FROM {uniq}inner WHERE x = ? AND flag = ?"
        )
        assert c.lookup(f"{uniq}outer", (2, True)).rows == [(2.0, 1)]  # an int is a fine DOUBLE
        with pytest.raises(
            InvalidArgument, match=re.escape("parameter 2 (flag) is BOOLEAN, got 1 (int)")
        ):
            c.lookup(f"{uniq}outer", (2.0, 1))

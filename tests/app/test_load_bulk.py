"""Bulk loading through the server's Spark: one atomic write, checked against Spark SQL.

One in-process server (on the session's Spark) serves the module.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from helpers import InProcessServer
from oracle import check_results

from partialflow.client import AlreadyExists, InvalidArgument, NotFound

N = 1_000_000
GROUPS = 500
VIEW_SQL = (
    "SELECT grp, COUNT(*) AS n, SUM(score) AS total, MAX(id) AS top FROM ld_big "
    "WHERE grp = ? GROUP BY grp"
)


@pytest.fixture(scope="module")
def loader(spark, tmp_path_factory):
    srv = InProcessServer(tmp_path_factory.mktemp("load") / "data", spark).start()
    yield srv
    srv.stop()


def _big_file(path) -> None:
    ids = pa.array(range(N), pa.int64())
    pq.write_table(
        pa.table(
            {
                "grp": pa.array([f"g{i % GROUPS}" for i in range(N)]),
                "score": pa.array([(i % 1000) * 0.25 for i in range(N)], pa.float64()),
                "id": ids,
                # int32 on disk: widened to the table's BIGINT
                "small": pa.array([i % 7 for i in range(N)], pa.int32()),
            }
        ),
        path,
        row_group_size=250_000,
    )


class Stop(Exception):
    pass


def test_a_million_row_parquet_file_is_one_write_and_views_match_spark(loader, tmp_path):
    path = tmp_path / "big.parquet"
    _big_file(path)
    with loader.client(timeout=120) as db:
        db.execute("CREATE TABLE ld_big (id BIGINT, grp TEXT, score DOUBLE, small BIGINT)")
        db.execute(f"CREATE VIEW ld_by_grp AS {VIEW_SQL}")
        first = db.insert("ld_big", [(-1, "g1", 1.0, 0)])
        warm = db.lookup_many("ld_by_grp", ["g1", "g2"], min_lsn=first)  # filled before
        assert warm["g2"].rows == []

        # A load whose client goes away before the write leaves nothing behind...
        def stop_early(event):
            if event.phase == "convert":
                raise Stop

        with pytest.raises(Stop):
            db.load("ld_big", str(path), progress=stop_early)
        assert db.query("SELECT COUNT(*) FROM ld_big").rows == [(1,)]

        # ...so running it again works, and the rows arrive as ONE write.
        events = []
        result = db.load("ld_big", str(path), progress=events.append)
        assert (result.rows, result.lsn) == (N, first + 1)
        phases = [e.phase for e in events]
        assert phases[-1] == "done" and {"scan", "convert", "write"} <= set(phases)
        converted = [e for e in events if e.phase == "convert"][-1]
        assert converted.done == converted.total == N

        counts = "SELECT COUNT(*), SUM(small) FROM ld_big"
        assert db.query(counts, as_of=first).rows == [(1, 0)]
        assert db.query(counts, as_of=result.lsn).rows == [(N + 1, sum(i % 7 for i in range(N)))]

        # warm keys were updated by the write, cold ones are filled by upqueries
        keys = ["g1", "g2", "g3", "g250", "g499", "nope"]
        results = db.lookup_many("ld_by_grp", keys, min_lsn=result.lsn)
        assert results["g1"].rows[0][1] == N // GROUPS + 1
        assert results["nope"].rows == []
        assert check_results(db, VIEW_SQL, results) == []

        with pytest.raises(AlreadyExists, match=f"at LSN {result.lsn}.*load it with force"):
            db.load("ld_big", str(path))


def test_reload_needs_force_and_survives_a_restart(spark, tmp_path):
    path = tmp_path / "small.parquet"
    pq.write_table(pa.table({"k": pa.array([1, 2, 3], pa.int64())}), path)
    with InProcessServer(tmp_path / "data", spark) as srv, srv.client() as db:
        db.execute("CREATE TABLE ld_small (k BIGINT)")
        assert db.load("ld_small", str(path)).rows == 3
    with InProcessServer(tmp_path / "data", spark) as srv, srv.client() as db:
        with pytest.raises(AlreadyExists, match="already loaded into ld_small"):
            db.load("ld_small", str(path))
        forced = db.load("ld_small", str(path), force=True)
        assert db.query("SELECT COUNT(*) FROM ld_small", as_of=forced.lsn).rows == [(6,)]
        # a changed file is a new file
        pq.write_table(pa.table({"k": pa.array([4], pa.int64())}), path)
        assert db.load("ld_small", str(path)).rows == 1
        # a dropped and re-created table starts over
        db.execute("DROP TABLE ld_small")
        db.execute("CREATE TABLE ld_small (k BIGINT)")
        assert db.load("ld_small", str(path)).rows == 1


def test_csv_with_and_without_header(loader, tmp_path):
    with loader.client() as db:
        db.execute("CREATE TABLE ld_csv (name TEXT PRIMARY KEY, n BIGINT, ok BOOLEAN)")
        headed = tmp_path / "headed.csv"
        headed.write_text("ok,name,n\ntrue,a,1\nfalse,b,2\n")  # columns in another order
        assert db.load("ld_csv", str(headed), format="csv", header=True).rows == 2
        bare = tmp_path / "bare.csv"
        bare.write_text("c;3;true\n")
        assert db.load("ld_csv", str(bare), format="csv", options={"sep": ";"}).rows == 1
        assert sorted(db.query("SELECT name, n, ok FROM ld_csv").rows) == [
            ("a", 1, True),
            ("b", 2, False),
            ("c", 3, True),
        ]


@pytest.mark.parametrize(
    "columns, message",
    [
        (
            {"k": pa.array([1]), "extra": pa.array([1])},
            "the file's column extra is not in the table",
        ),
        ({"other": pa.array([1])}, "the file has no column k"),
        ({"k": pa.array(["x"])}, "column k is BIGINT but the file's k is string"),
        ({"k": pa.array([1.5])}, "column k is BIGINT but the file's k is double"),
    ],
)
def test_a_file_that_does_not_fit_the_table_is_refused(loader, tmp_path, columns, message):
    with loader.client() as db:
        db.execute("CREATE TABLE IF NOT EXISTS ld_fit (k BIGINT)")
        before = db.query("SELECT COUNT(*) FROM ld_fit").rows
        path = tmp_path / "misfit.parquet"
        pq.write_table(pa.table(columns), path)
        with pytest.raises(InvalidArgument, match=message):
            db.load("ld_fit", str(path))
        assert db.query("SELECT COUNT(*) FROM ld_fit").rows == before


def test_bad_csv_values_unknown_tables_and_missing_files(loader, tmp_path):
    with loader.client() as db:
        db.execute("CREATE TABLE ld_bad (k BIGINT, s TEXT)")
        bad = tmp_path / "bad.csv"
        pacsv.write_csv(pa.table({"k": ["1", "two"], "s": ["a", "b"]}), bad)
        with pytest.raises(InvalidArgument, match="cannot load into ld_bad"):
            db.load("ld_bad", str(bad), format="csv", header=True)
        assert db.query("SELECT COUNT(*) FROM ld_bad").rows == [(0,)]
        with pytest.raises(NotFound, match="no such file"):
            db.load("ld_bad", str(tmp_path / "missing.parquet"))
        with pytest.raises(NotFound, match="ld_nothing"):
            db.load("ld_nothing", str(bad), format="csv")
        with pytest.raises(InvalidArgument, match="unknown load format"):
            db.load("ld_bad", str(bad), format="json")

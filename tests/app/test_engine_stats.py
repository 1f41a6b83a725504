"""The engine's typed figures render under the names and in the order clients have always
seen (``EngineStats.as_dict``): pure logic, no server."""

from __future__ import annotations

from partialflow.server.dataflow.stats import DataflowStats, ViewStats
from partialflow.server.engine_stats import EngineStats, WriteCounts
from partialflow.server.storage import TableChange


def _dataflow(checkpoint: dict | None) -> DataflowStats:
    return DataflowStats(
        applied_lsn=7, memory_limit=100, memory_bytes=5, partial_bytes=3, full_bytes=2,
        views={"v": ViewStats(1, 2, 3, 4, 5, 6)}, upquery_ms={"p50": 1.0}, spark_jobs=4,
        runner={"upquery_workers": 2}, fills_in_flight=0, state_anomalies=0,
        subscriptions=1, subscribed_keys=2, counters={"deltas": 9}, checkpoint=checkpoint)


def test_storage_lsn_and_engine_limit_replace_the_dataflows_in_place() -> None:
    df = _dataflow(None)
    out = EngineStats(df, lsn=9, memory_limit=123, storage={"fsyncs": 1}, writes={},
                      spark={"up": True}).as_dict()
    assert list(out) == [
        "views", "lsn", "memory_limit", "memory_bytes", "partial_bytes", "full_bytes",
        "upquery_ms", "spark_jobs", "upquery_workers", "fills_in_flight", "state_anomalies",
        "subscriptions", "subscribed_keys", "deltas", "applied_lsn", "storage", "writes",
        "spark"]
    assert (out["lsn"], out["applied_lsn"], out["memory_limit"]) == (9, 7, 123)
    assert out["views"] == {"v": df.views["v"].as_dict()}


def test_optional_sections_appear_only_when_there() -> None:
    out = EngineStats(_dataflow({"seq": 3}), lsn=9, memory_limit=1, storage={}, writes={},
                      spark={}, verifier={"mismatches": 0}, follow={"lag": 1}).as_dict()
    assert list(out)[-6:] == ["applied_lsn", "storage", "writes", "verifier", "spark", "follow"]
    assert out["checkpoint"] == {"seq": 3}


def test_write_counts_appear_once_counted_in_that_order() -> None:
    counts = WriteCounts()
    assert counts.as_dict() == {}
    counts.write([TableChange("a", [(1,), (2,)], [])])
    counts.write([TableChange("a", [(3,)], []), TableChange("B", [], [(1,)])])
    counts.load(5)
    assert list(counts.as_dict().items()) == [
        ("writes", 2), ("rows_inserted", 3), ("rows_deleted", 1), ("transactions", 1),
        ("loads", 1), ("load_rows", 5)]

"""The Prometheus endpoint, scraped over real HTTP: counters move after writes and reads."""

from __future__ import annotations

import urllib.request

import pytest
from helpers import InProcessServer
from prometheus_client.parser import text_string_to_metric_families

from partialflow.server.app.main import metrics_port_of


@pytest.fixture(scope="module")
def metered(spark, tmp_path_factory):
    srv = InProcessServer(tmp_path_factory.mktemp("metered") / "data", spark, metrics_port=0)
    srv.start()
    yield srv
    srv.stop()


def scrape(srv) -> dict[tuple[str, tuple], float]:
    """Every sample of the endpoint as {(name, sorted labels): value}."""
    port = metrics_port_of(srv.server)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_counters_move_after_writes_and_reads(metered):
    view = (("view", "met_total"),)
    with metered.client() as db:
        db.execute("CREATE TABLE met_t (g TEXT, v BIGINT)")
        db.execute(
            "CREATE VIEW met_total AS SELECT g, SUM(v) AS s FROM met_t WHERE g = ? GROUP BY g"
        )
        before = scrape(metered)
        lsn = db.insert("met_t", [("a", 1), ("a", 2), ("b", 5)])
        db.delete("met_t", [("b", 5)])
        assert db.lookup("met_total", "a", min_lsn=lsn + 1).rows == [("a", 3)]  # miss, upquery
        assert db.lookup("met_total", "a").rows == [("a", 3)]  # hit
        db.flush()
    after = scrape(metered)

    def moved(name: str, labels: tuple = ()) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert moved("partialflow_writes_total") == 2
    assert moved("partialflow_rows_written_total", (("op", "insert"),)) == 3
    assert moved("partialflow_rows_written_total", (("op", "delete"),)) == 1
    assert moved("partialflow_view_misses_total", view) == 1
    assert moved("partialflow_view_hits_total", view) == 1
    assert moved("partialflow_view_upqueries_total", view) == 1
    assert after[("partialflow_view_keys_filled", view)] == 1
    assert after[("partialflow_view_state_bytes", view)] > 0
    assert moved("partialflow_lsn_written") == 2
    assert after[("partialflow_lsn_applied", ())] == after[("partialflow_lsn_written", ())]
    assert after[("partialflow_freshness_lag_lsns", ())] == 0
    assert moved("partialflow_storage_flushes_total") >= 1
    assert moved("partialflow_wal_fsyncs_total") >= 1
    assert moved("partialflow_spark_jobs_total") >= 1
    # the fill's footer-estimated footprint was measured (the rows were all unflushed)
    assert moved("partialflow_upquery_scans_total") == 1
    assert ("partialflow_upquery_row_groups_in_segments_total", ()) in after
    # the latency histogram saw the one fill, in its view's series
    count = ("partialflow_upquery_duration_seconds_count", (("outcome", "ok"), *view))
    assert moved(*count) == 1
    total = ("partialflow_upquery_duration_seconds_sum", (("outcome", "ok"), *view))
    assert 0 < after[total] < 120
    assert after[("partialflow_stats_ok", ())] == 1
    # Spark is up and was never restarted (a restart: tests/app/test_spark_restart.py)
    assert after[("partialflow_spark_up", ())] == 1
    assert after[("partialflow_spark_restarts_total", ())] == 0


def test_compaction_is_counted(metered):
    with metered.client() as db:
        db.execute("CREATE TABLE met_c (k BIGINT)")
        for k in (1, 2):  # two segments, so there is something to merge
            db.insert("met_c", [(k,)])
            db.flush()
        before = scrape(metered)
        db.compact("met_c")
    assert (
        scrape(metered)[("partialflow_storage_compactions_total", ())]
        > before[("partialflow_storage_compactions_total", ())]
    )


def test_metrics_are_off_unless_asked(server):
    assert metrics_port_of(server.server) is None


def test_a_cold_start_reports_its_recovery_as_zero(metered):
    """A fresh data directory has no checkpoint: the recovery gauges say 0 keys restored
    and 0 writes replayed (they used to be missing until a restart from a checkpoint)."""
    samples = scrape(metered)
    assert samples[("partialflow_checkpoint_recovered_keys", ())] == 0
    assert samples[("partialflow_checkpoint_replayed_writes", ())] == 0
    assert ("partialflow_checkpoint_recovery_s", ()) in samples
    with metered.client() as db:
        recovery = db.stats()["checkpoint"]
    assert recovery["recovered_keys"] == 0 and recovery["replayed_writes"] == 0


def test_the_disk_tier_is_measured(spark, tmp_path):
    # A memory limit far below the view's keys and a disk tier: keys read are shelved,
    # and reading them again reads them from the tier; the endpoint says how many, as
    # stats do.
    srv = InProcessServer(tmp_path / "data", spark, metrics_port=0, memory_limit=20_000,
                          disk_limit=50_000_000)
    srv.start()
    try:
        c = srv.client()
        c.execute("CREATE TABLE tiered (k BIGINT, v BIGINT)")
        c.insert("tiered", [(k, k * 2) for k in range(400)])
        c.execute("CREATE VIEW tiered_sum AS SELECT k, SUM(v) AS s FROM tiered "
                  "WHERE k = ? GROUP BY k")
        keys = list(range(400))
        c.lookup_many("tiered_sum", keys)
        c.lookup_many("tiered_sum", keys)
        samples = scrape(srv)
        stats = c.stats()
        assert stats["tier_keys"] > 0 and stats["tier_read"] > 0
        assert samples[("partialflow_tier_broken", ())] == 0
        assert samples[("partialflow_tier_limit", ())] == 50_000_000
        assert samples[("partialflow_tier_shelved_total", ())] >= stats["tier_keys"]
        assert samples[("partialflow_tier_read_total", ())] > 0
        assert ("partialflow_tier_unshelved_total", ()) in samples
        assert samples[("partialflow_tier_keys", ())] > 0
        c.close()
    finally:
        srv.stop()


def test_no_disk_tier_no_tier_metrics(metered):
    assert not any(name.startswith("partialflow_tier_") for name, _ in scrape(metered))

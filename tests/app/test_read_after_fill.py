"""A read answered by a fill returns only once the fill is published.

A client that looks keys up and then looks them up again relies on the second lookup not
waiting for the executor: keys in memory are published hits, and keys the memory limit
shelved in the disk tier are read from it by the reader itself (shelfreads.py). The
executor wakes a read answered in a packet at the end of that packet, after it published
the keys and the tier's floor (fill.py ``Waiter.woken``). Woken earlier, the second
lookup came in while the executor was still shelving the keys the fill pushed out, found
the old floor, and sent every key back through the executor (brought back from the tier
one packet at a time, none read by the reader).
"""

from __future__ import annotations

from helpers import InProcessServer


def test_a_lookup_again_right_after_its_fill_reads_shelved_keys_itself(spark, tmp_path):
    srv = InProcessServer(tmp_path / "data", spark, memory_limit=20_000,
                          disk_limit=50_000_000)
    srv.start()
    try:
        c = srv.client()
        c.execute("CREATE TABLE refetched (k BIGINT, v BIGINT)")
        c.insert("refetched", [(k, k * 3) for k in range(2_000)])
        c.execute("CREATE VIEW refetched_sum AS SELECT k, SUM(v) AS s FROM refetched "
                  "WHERE k = ? GROUP BY k")
        for start in range(0, 2_000, 400):  # five rounds, fresh keys each
            keys = list(range(start, start + 400))
            before = c.stats()  # (not between the lookups: a stats call waits for the executor)
            first = c.lookup_many("refetched_sum", keys)
            again = c.lookup_many("refetched_sum", keys)
            after = c.stats()
            assert [first[k].rows for k in keys] == [[(k, k * 3)] for k in keys]
            assert [again[k].rows for k in keys] == [first[k].rows for k in keys]
            assert after["tier_read"] > before["tier_read"], "shelved keys read by the reader"
            assert after["tier_unshelved"] == before["tier_unshelved"], (
                "keys a lookup filled (fresh keys: none was shelved before it) went back "
                "through the executor when read again")
        c.close()
    finally:
        srv.stop()

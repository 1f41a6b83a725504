"""Transactions through the real server: the Python client's ``transaction()``, gRPC
``Transact`` and SQL blocks in ``execute``; and money moved between accounts held in two
tables, with a view of the totals that no read, lookup_many, subscription event or
snapshot query ever sees out of balance, under concurrent transactions, evictions and
fills held open by the slow fault. Split into two writes, a transfer would show a state
between them (money gone from one table and not yet in the other)."""

from __future__ import annotations

import io
import random
import threading
import time

import pytest
from helpers import InProcessServer

from partialflow.client import Change, Client, Heartbeat, InvalidArgument, NotFound, Snapshot, shell
from partialflow.client.stress.hooks import TestHooks

GROUPS, PER_GROUP, START = 3, 6, 100  # accounts per group, each holding START in a and in b
TOTAL = PER_GROUP * 2 * START  # every group's money: what the view must always show


def _accounts(c: Client, u: str) -> str:
    c.execute(f"CREATE TABLE {u}a (id BIGINT PRIMARY KEY, grp BIGINT, bal BIGINT)")
    c.execute(f"CREATE TABLE {u}b (id BIGINT PRIMARY KEY, bal BIGINT)")
    ids = range(GROUPS * PER_GROUP)
    c.insert(f"{u}a", [(i, i % GROUPS, START) for i in ids])
    c.insert(f"{u}b", [(i, START) for i in ids])
    view = f"{u}totals"
    c.execute(f"CREATE VIEW {view} AS SELECT a.grp, SUM(a.bal + b.bal) AS total "
              f"FROM {u}a a JOIN {u}b b ON a.id = b.id WHERE a.grp = ? GROUP BY a.grp")
    return view


def test_python_transaction_is_one_write(server, uniq) -> None:
    u = uniq
    with server.client(timeout=120) as c:
        view = _accounts(c, u)
        assert c.lookup(view, 0).rows == [(0, TOTAL)]
        before = c.stats()["storage"]["lsn"]
        with c.transaction() as tx:
            tx.update(f"{u}a", [(0, 0, START)], [(0, 0, START - 30)])
            tx.update(f"{u}b", [(3, START)], [(3, START + 30)])
            tx.insert(f"{u}a", [(100, 0, 5)])
            tx.insert(f"{u}b", [(100, 0)])
            tx.delete(f"{u}b", [(100, 0)])  # after its insert, in the same transaction
            tx.insert(f"{u}b", [(100, 7)])
        assert tx.lsn == before + 1
        assert c.lookup(view, 0, min_lsn=tx.lsn).rows == [(0, TOTAL + 12)]
        got = c.query(f"SELECT SUM(bal) FROM {u}a", as_of=tx.lsn - 1).rows
        assert got == [(GROUPS * PER_GROUP * START,)]  # before it: untouched
        # An exception in the block sends nothing.
        with pytest.raises(RuntimeError), c.transaction() as tx2:
            tx2.insert(f"{u}a", [(101, 0, 1)])
            raise RuntimeError("changed my mind")
        assert tx2.lsn is None and c.stats()["storage"]["lsn"] == tx.lsn
        # A refused transaction writes nothing: its second change deletes a missing row.
        with pytest.raises(NotFound, match=r"change 1: table '\w+' delete row 0"), \
                c.transaction() as tx3:
            tx3.insert(f"{u}a", [(102, 0, 1)])
            tx3.delete(f"{u}b", [(999, 1)])
        # Bad values are named by change, table, row and column.
        with pytest.raises(InvalidArgument, match=r"change 1: table '\w+b' row 0.*column 'bal'"), \
                c.transaction() as tx4:
            tx4.insert(f"{u}a", [(103, 0, 1)])
            tx4.insert(f"{u}b", [(103, "lots")])
        assert c.stats()["storage"]["lsn"] == tx.lsn
        assert c.query(f"SELECT id FROM {u}a WHERE id > 100").rows == []


def test_sql_transaction_block(server, uniq) -> None:
    u = uniq
    with server.client(timeout=120) as c:
        view = _accounts(c, u)
        before = c.stats()["storage"]["lsn"]
        r = c.execute(f"BEGIN; UPDATE {u}a SET bal = bal - 40 WHERE id = 1; "
                      f"UPDATE {u}b SET bal = bal + 40 WHERE id = 4; "
                      f"INSERT INTO {u}a VALUES (200, 1, 9); DELETE FROM {u}a WHERE id = 200; "
                      f"COMMIT")
        assert r.lsn == before + 1
        assert c.lookup(view, 1, min_lsn=r.lsn).rows == [(1, TOTAL)]
        assert c.query(f"SELECT bal FROM {u}a WHERE id = 1").rows == [(START - 40,)]
        # ROLLBACK: nothing written.
        r = c.execute(f"BEGIN; DELETE FROM {u}b; ROLLBACK")
        assert r.lsn == before + 1 == c.stats()["storage"]["lsn"]
        with pytest.raises(InvalidArgument, match="only INSERT, UPDATE and DELETE"):
            c.execute(f"BEGIN; SELECT * FROM {u}a; COMMIT")
        with pytest.raises(InvalidArgument, match="ends with COMMIT or ROLLBACK"):
            c.execute(f"BEGIN; DELETE FROM {u}b")
        assert c.stats()["storage"]["lsn"] == before + 1
        # The command line's script runner sends a block as one statement: one write.
        out, err = io.StringIO(), io.StringIO()
        script = (f"BEGIN;\nINSERT INTO {u}a VALUES (300, 0, 1);\n"
                  f"INSERT INTO {u}b VALUES (300, 1);\nCOMMIT;\n")
        assert shell.run_script(c, script, out, err) == 0, err.getvalue()
        assert c.stats()["storage"]["lsn"] == before + 2
        assert c.query(f"SELECT COUNT(*) FROM {u}b WHERE id = 300", as_of=before + 2).rows \
            == [(1,)]


def _transfers(address: str, u: str, me: int, threads: int, stop: threading.Event,
               done: list[int], errors: list[BaseException]) -> None:
    """Move money from a[x] to b[y] (x, y in one group, owned by this thread) as one
    transaction each time; balances are known here since only this thread changes them."""
    rng = random.Random(me)
    mine = [i for i in range(GROUPS * PER_GROUP) if i % threads == me]
    a = dict.fromkeys(mine, START)
    b = dict.fromkeys(mine, START)
    try:
        with Client(address, timeout=600) as c:
            while not stop.is_set():
                x = rng.choice(mine)
                y = rng.choice([i for i in mine if i % GROUPS == x % GROUPS])
                amount = rng.randint(1, 20)
                with c.transaction() as tx:
                    tx.update(f"{u}a", [(x, x % GROUPS, a[x])], [(x, x % GROUPS, a[x] - amount)])
                    tx.update(f"{u}b", [(y, b[y])], [(y, b[y] + amount)])
                a[x] -= amount
                b[y] += amount
                done.append(tx.lsn or 0)
    except BaseException as err:  # noqa: BLE001 - reported by the test
        errors.append(err)


@pytest.fixture
def server_own(tmp_path, spark):
    """A server of this test's own: the slow fault it switches on must not slow other
    tests, and fills on a busy CI machine may take long (generous upquery timeout)."""
    srv = InProcessServer(tmp_path / "data", spark, upquery_timeout=600).start()
    yield srv
    srv.stop()


def test_cross_table_invariant_never_breaks(server_own, uniq, monkeypatch) -> None:
    u = uniq
    server = server_own
    monkeypatch.setenv("PARTIALFLOW_TEST_HOOKS", "1")
    with server.client(timeout=600) as c:
        view = _accounts(c, u)
        groups = list(range(GROUPS))
        assert {k: r.rows for k, r in c.lookup_many(view, groups).items()} == {
            g: [(g, TOTAL)] for g in groups}
        first = c.stats()["storage"]["lsn"]
        stop = threading.Event()
        done: list[int] = []
        errors: list[BaseException] = []
        writers = [threading.Thread(target=_transfers, args=(server.address, u, i, 3, stop,
                                                            done, errors)) for i in range(3)]
        # A transfer keeps every group's total: whole, it changes no row of the view, so
        # the subscription sees heartbeats only; split, it would see the total move.
        seen: dict[str, int] = {"reads": 0, "events": 0, "queries": 0, "sub_lsn": 0}
        bad: list[str] = []

        def subscriber() -> None:
            try:
                subscribe()
            except BaseException as err:  # noqa: BLE001 - reported by the test
                errors.append(err)

        def subscribe() -> None:
            with Client(server.address, timeout=600) as s, s.subscribe(view, groups) as sub:
                rows: dict[tuple, list] = {}
                pending: int | None = None

                def check(lsn: int) -> None:
                    for key, rs in rows.items():
                        if rs != [(key[0], TOTAL)]:
                            bad.append(f"subscription at LSN {lsn}: {key} -> {rs}")

                for ev in sub:
                    if isinstance(ev, Snapshot):
                        rows = {k: list(v) for k, v in ev.rows.items()}
                        check(ev.lsn)
                        ready.set()
                    elif isinstance(ev, Change):
                        if pending is not None and ev.lsn != pending:
                            check(pending)  # every change of the previous LSN is in
                        pending = ev.lsn
                        cur = rows.setdefault(ev.key, [])
                        for r in ev.deleted:
                            cur.remove(r)
                        cur.extend(ev.inserted)
                        seen["events"] += 1
                    elif isinstance(ev, Heartbeat):
                        if pending is not None:
                            check(pending)
                            pending = None
                        seen["sub_lsn"] = ev.lsn
                    if stop.is_set():
                        return

        ready = threading.Event()
        sub_thread = threading.Thread(target=subscriber, daemon=True)
        sub_thread.start()
        assert ready.wait(300), f"no subscription snapshot: {errors}"
        for w in writers:
            w.start()
        hooks = TestHooks(c)
        start = time.monotonic()
        rng = random.Random(7)
        try:
            # At least 4 s, 12 rounds of reads, and the subscription live past 20
            # transfers (fills are slow on a busy machine).
            while (time.monotonic() - start < 4.0 or seen["reads"] < 12
                   or seen["sub_lsn"] < first + 20) and time.monotonic() - start < 90:
                g = rng.choice(groups)
                r = c.lookup(view, g)
                if r.rows != [(g, TOTAL)]:
                    bad.append(f"lookup {g} at LSN {r.lsn}: {r.rows}")
                for k, r in c.lookup_many(view, groups).items():
                    if r.rows != [(k, TOTAL)]:
                        bad.append(f"lookup_many {k} at LSN {r.lsn}: {r.rows}")
                seen["reads"] += 1
                step = seen["reads"] % 10
                if step == 3:
                    c.evict(view, None)  # the next reads fill again, while transfers go on
                elif step == 5:
                    hooks.set_faults("slow:0.3")  # fills held open while transfers commit
                elif step == 8:
                    hooks.set_faults("")
                if done and step in (1, 6):  # any LSN since the transfers began
                    lsn = rng.randint(first, max(done))
                    q = c.query(f"SELECT (SELECT SUM(bal) FROM {u}a) + "
                                f"(SELECT SUM(bal) FROM {u}b)", as_of=lsn).rows
                    seen["queries"] += 1
                    if q != [(TOTAL * GROUPS,)]:
                        bad.append(f"query as of {lsn}: {q}")
        finally:
            hooks.set_faults("")
            stop.set()
            for w in writers:
                w.join(30)
        sub_thread.join(30)
        assert not errors, errors
        assert not bad, bad[:5]
        assert len(done) >= 20 and seen["queries"] > 0, (len(done), seen)
        assert seen["sub_lsn"] >= first + 20, seen  # it followed the transfers
        # Settled: every group exact once the last transfer is in.
        final = c.lookup_many(view, groups, min_lsn=max(done))
        assert {k: r.rows for k, r in final.items()} == {g: [(g, TOTAL)] for g in groups}


def test_a_transaction_that_cancels_out_hides_no_later_write_from_a_fill(tmp_path, spark,
                                                                         uniq) -> None:
    """A view's fill reads the unflushed rows too: after a transaction whose changes to
    the table cancel out, a miss still sees every later write (a flushless server, so the
    rows are unflushed when the fill reads them), as Spark SQL over the table does."""
    u = uniq
    srv = InProcessServer(tmp_path / "data", spark, flush_interval=3600.0).start()
    try:
        with srv.client(timeout=120) as c:
            c.execute(f"CREATE TABLE {u}t (id BIGINT PRIMARY KEY, grp BIGINT, v BIGINT)")
            c.execute(f"CREATE VIEW {u}sums AS SELECT grp, SUM(v) AS s, COUNT(*) AS n "
                      f"FROM {u}t WHERE grp = ? GROUP BY grp")
            c.insert(f"{u}t", [(1, 7, 10)])
            with c.transaction() as tx:
                tx.insert(f"{u}t", [(2, 7, 20)])
                tx.delete(f"{u}t", [(2, 7, 20)])
            c.insert(f"{u}t", [(3, 7, 30), (4, 8, 40)])
            assert c.stats()["storage"]["flushed_lsn"] == 0
            for grp in (7, 8):
                want = c.query(f"SELECT grp, SUM(v) AS s, COUNT(*) AS n FROM {u}t "
                               f"WHERE grp = {grp} GROUP BY grp").rows
                assert c.lookup(f"{u}sums", grp).rows == want
            assert c.lookup(f"{u}sums", 7).rows == [(7, 40, 2)]
    finally:
        srv.stop()

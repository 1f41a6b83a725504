"""The checkpoint directory on its own: chains merge to what was recorded, damaged files are
skipped with a log line and the previous checkpoint is used, a crash before the manifest
leaves nothing visible, compaction and retention keep what recovery needs.

Contents here are made-up states (signature -> fill key -> index key -> value); the
dataflow's use of them is tested through a real server in tests/app/test_checkpoints.py.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading

import pytest

from partialflow.operators.values import NAN
from partialflow.server.checkpoint import CheckpointStore, Manifest, merge
from partialflow.server.checkpoint.files import list_manifests


def _take(store: CheckpointStore, lsn: int, chunks: list, incremental: bool,
          states: tuple[str, ...] = ("a", "b")) -> Manifest:
    done = threading.Event()
    got: list = []
    store.begin(store.next_seq())
    for chunk in chunks:
        store.add(chunk)
    template = Manifest(0, lsn, "incremental" if incremental else "full", [], [("v", "sql")],
                        {"t": 1}, {s: s for s in states}, "x")
    template.seq = store._seq

    def finished(m, err):
        got.append((m, err))
        done.set()

    store.commit(template, incremental=incremental, done=finished)
    assert done.wait(30)
    m, err = got[0]
    assert err is None, err
    return m


def _usable(_m: Manifest) -> None:
    return None


def _model(contents: dict, chunks: list) -> dict:
    """What the records mean, written out independently of merge.apply."""
    for chunk in chunks:
        for sig, records in chunk:
            state = contents.setdefault(sig, {})
            for rec in records:
                if rec[0] == "R":
                    state.clear()
                elif rec[0] == "F":
                    state[rec[1]] = {}
                elif rec[0] == "H":
                    state.pop(rec[1], None)
                else:
                    for ik, v in rec[2]:
                        if v is None:
                            state[rec[1]].pop(ik, None)
                        else:
                            state[rec[1]][ik] = v
    return contents


def _random_chunks(rng: random.Random, filled: dict, n: int) -> list:
    """Random records over states a and b that keep 'I' records on filled keys only."""
    chunks = []
    for _ in range(n):
        chunk = []
        for sig in ("a", "b"):
            keys = filled.setdefault(sig, set())
            records: list[tuple] = []
            for _ in range(rng.randint(1, 6)):
                fk = (rng.randint(0, 9),)
                roll = rng.random()
                if roll < 0.3:
                    records.append(("F", fk))
                    keys.add(fk)
                elif roll < 0.4:
                    records.append(("H", fk))
                    keys.discard(fk)
                elif roll < 0.42:
                    records.append(("R",))
                    keys.clear()
                elif keys:
                    fk = rng.choice(sorted(keys))
                    pairs = [((fk[0], rng.randint(0, 4)),
                              None if rng.random() < 0.3 else {(fk[0], rng.random()): 1})
                             for _ in range(rng.randint(1, 3))]
                    records.append(("I", fk, pairs))
            chunk.append((sig, records))
        chunks.append(chunk)
    return chunks


def test_a_chain_merges_to_what_was_recorded_and_compacts_to_the_same(tmp_path):
    rng = random.Random(7)
    store = CheckpointStore(tmp_path)
    expected: dict = {}
    filled: dict = {}
    for i in range(12):  # past MAX_CHAIN: compaction must have run at least once
        chunks = _random_chunks(rng, filled, 3)
        _model(expected, chunks)
        _take(store, 10 * (i + 1), chunks, incremental=i > 0)
        store.writer.task(lambda: None)
        loaded = CheckpointStore(tmp_path).load(_usable)
        assert loaded is not None
        m, contents = loaded
        assert m.lsn == 10 * (i + 1)
        assert contents == {s: expected.get(s, {}) for s in ("a", "b")}
    assert store.compactions >= 1
    # Retention: the newest two checkpoints and only the files they name.
    assert len(list_manifests(tmp_path)) == 2
    names = {f.name for _, p in list_manifests(tmp_path)
             for f in Manifest.from_json(json.loads(p.read_text())).files}
    assert {p.name for p in tmp_path.glob("*.ckpt")} == names
    store.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete"])
def test_a_damaged_data_file_is_skipped_for_the_one_before(tmp_path, caplog, damage):
    store = CheckpointStore(tmp_path)
    _take(store, 5, [[("a", [("F", (1,)), ("I", (1,), [((1,), {(1, "x"): 1})])])]], False)
    m2 = _take(store, 9, [[("a", [("I", (1,), [((1,), {(1, "y"): 2})])])]], True)
    store.close()
    newest = tmp_path / m2.files[-1].name
    data = bytearray(newest.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        newest.write_bytes(bytes(data))
    elif damage == "truncate":
        newest.write_bytes(bytes(data[: len(data) - 3]))
    else:
        newest.unlink()
    with caplog.at_level(logging.WARNING, logger="partialflow.checkpoint"):
        loaded = CheckpointStore(tmp_path).load(_usable)
    assert loaded is not None
    m, contents = loaded
    assert m.lsn == 5
    assert contents["a"] == {(1,): {(1,): {(1, "x"): 1}}}
    assert any(f"checkpoint {m2.seq} skipped" in r.getMessage() for r in caplog.records)


def test_a_torn_manifest_is_skipped_and_a_file_without_one_is_invisible(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    _take(store, 5, [[("a", [("F", (1,))])]], False)
    m2 = _take(store, 9, [[("a", [("F", (2,))])]], True)
    # A crash after the next data file was written but before its manifest.
    store.begin(store.next_seq())
    store.add([("a", [("F", (3,))])])
    store.writer.task(lambda: None)
    store.close()
    path = tmp_path / f"manifest-{m2.seq:08d}.json"
    path.write_bytes(path.read_bytes()[:40])
    with caplog.at_level(logging.WARNING, logger="partialflow.checkpoint"):
        reopened = CheckpointStore(tmp_path)
        loaded = reopened.load(_usable)
    assert loaded is not None and loaded[0].lsn == 5
    assert loaded[1]["a"] == {(1,): {}}
    assert not list(tmp_path.glob("*.tmp"))  # the unfinished file was removed on open
    assert any("skipped" in r.getMessage() for r in caplog.records)


def test_an_edited_manifest_fails_its_checksum(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    m = _take(store, 5, [[("a", [("F", (1,))])]], False)
    store.close()
    path = tmp_path / f"manifest-{m.seq:08d}.json"
    body = json.loads(path.read_text())
    body["lsn"] = 6
    path.write_text(json.dumps(body))
    with caplog.at_level(logging.WARNING, logger="partialflow.checkpoint"):
        assert CheckpointStore(tmp_path).load(_usable) is None
    assert any("checksum" in r.getMessage() for r in caplog.records)


def test_unusable_checkpoints_fall_back_with_the_reason_logged(tmp_path, caplog):
    store = CheckpointStore(tmp_path)
    _take(store, 5, [[("a", [("F", (1,))])]], False)
    _take(store, 9, [[("a", [("F", (2,))])]], True)
    store.close()
    with caplog.at_level(logging.WARNING, logger="partialflow.checkpoint"):
        loaded = CheckpointStore(tmp_path).load(
            lambda m: "ahead of storage" if m.lsn > 6 else None)
    assert loaded is not None and loaded[0].lsn == 5
    assert any("ahead of storage" in r.getMessage() for r in caplog.records)
    assert CheckpointStore(tmp_path).newest_lsn() == 5  # storage keeps its log from here


def test_nan_comes_back_as_the_one_nan_object():
    chunk = [("a", [("F", (NAN,)), ("I", (NAN,), [((NAN, 1.5), {(NAN, float("nan")): 2})])])]
    payload = merge.dumps(chunk)
    (sig, records), = merge.loads(payload)
    (_, fk), (_, fk2, [(ik, bag)]) = records
    assert fk[0] is NAN and fk2[0] is NAN and ik[0] is NAN
    row, = bag
    assert row[0] is NAN and row[1] is NAN
    # No NaN: nothing is rebuilt.
    plain = merge.loads(merge.dumps([("a", [("F", (1.0, math.inf))])]))
    assert plain == [("a", [("F", (1.0, math.inf))])]


def test_size_records_of_earlier_versions_are_read_and_ignored(tmp_path):
    """Checkpoints written before states counted their keys carry ("S", fk, bytes)
    records; they still load, to the same contents."""
    store = CheckpointStore(tmp_path)
    _take(store, 5, [[("a", [("F", (1,)), ("S", (1,), 4096),
                             ("I", (1,), [((1,), {(1, "x"): 1})]), ("S", (1,), 999)])]], False)
    store.close()
    loaded = CheckpointStore(tmp_path).load(_usable)
    assert loaded is not None
    m, contents = loaded
    assert contents["a"] == {(1,): {(1,): {(1, "x"): 1}}}

"""The peers benchmark (bench/peers.py) at a tiny size: what it measures is not tested
here (benchmarks measure speed), but that every engine's answers are checked against an
independent recomputation and the verdict is reported, a wrong engine marked. The Pathway
part is skipped when the optional ``bench`` extra is not installed (CI does not install it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import peers
import peers_report

TINY = {**peers.DEFAULTS, "rows": 200, "products": 50, "categories": 5, "batches": [1, 100],
        "reads": 10}


def test_reference_and_compare_catch_a_wrong_answer() -> None:
    data = peers.draw(TINY)
    want = peers.reference(data)
    # The SQLite reference against plain Python over the same rows.
    cat = dict(data["info"])
    visits = [r for ph in data["phases"] if ph["table"] == "visit" for w in ph["writes"]
              for r in w]
    maxlen: dict[str, int] = {}
    for product, _, length in visits:
        maxlen[cat[product]] = max(maxlen.get(cat[product], -1), length)
    assert want["maxlen"] == maxlen
    bids = [r for ph in data["phases"] if ph["table"] == "bid" for w in ph["writes"] for r in w]
    counts: dict[int, int] = {}
    for _, auction, _, _ in bids:
        counts[auction] = counts.get(auction, 0) + 1
    assert want["hot"] == {a: n for a, n in counts.items() if n > 10}
    assert len(want["avg_winning"]) == 10

    assert peers.compare(want, want) == {"exact": True, "mismatches": 0, "examples": []}
    wrong = {v: dict(a) for v, a in want.items()}
    wrong["avg_winning"][3] += 0.5
    del wrong["maxlen"]["c1"]
    verdict = peers.compare(wrong, want)
    assert not verdict["exact"] and verdict["mismatches"] == 2
    assert ["maxlen", "c1", None, want["maxlen"]["c1"]] in verdict["examples"]

    # A wrong engine is named and its figures starred in the report.
    phase = {"table": "visit", "batch": 1, "rows": 1, "rows_per_s": 10,
             "executor_rows_per_s": 20, "rows_per_executor_cpu_s": 30}
    sec = {"loadavg": {"start": [1.0], "end": [1.0]}, "caveats": ["c"], "engines": {
        "partialflow": {"phases": [phase], "reads": {}, "exactness": peers.compare(want, want)},
        "peer": {"phases": [{**phase, "rows_per_s": 40}], "exactness": verdict}}}
    text = peers_report.render(sec)
    assert "partialflow: exact" in text
    assert "peer: WRONG: 2 mismatches" in text and "40*" in text


def test_partialflow_and_postgres_answers_checked(spark, tmp_path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pg"))
    import upstream

    if upstream.skip_reason():
        pytest.skip(upstream.skip_reason())
    # pool=None: reads from this process, not a load process (seconds saved);
    # pg_durable=False: the tests' shared PostgreSQL stays as the other tests need it
    sec = peers.section({**TINY, "pathway": False}, tmp_path, spark, None, pg_durable=False)
    for name in ("partialflow", "postgresql"):
        e = sec["engines"][name]
        assert e["exactness"]["exact"], (name, e["exactness"])
        assert [(p["table"], p["batch"]) for p in e["phases"]] == [
            ("visit", 1), ("visit", 100), ("bid", 1), ("bid", 100)]
        assert all(p["rows_per_s"] > 0 for p in e["phases"])
        assert set(e["reads"]) == {"maxlen", "avg_winning", "hot"}
    text = peers.report(sec)
    assert "partialflow: exact" in text and "postgresql: exact" in text


def test_pathway_answers_checked(tmp_path) -> None:
    missing = peers.pathway_missing()
    if missing:
        pytest.skip(missing)
    import pickle

    data = peers.draw(TINY)
    rows = tmp_path / "rows.pickle"
    rows.write_bytes(pickle.dumps(data))
    res = peers.run_pathway(rows, tmp_path, "strict", timeout=120)
    verdict = peers.compare(res["answers"], peers.reference(data))
    assert verdict["exact"], verdict
    assert [p["batch"] for p in res["phases"]] == [1, 100, 1, 100]
    assert all(p["rows_per_s"] > 0 for p in res["phases"])

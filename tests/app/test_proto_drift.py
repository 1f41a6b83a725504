"""The committed stubs are exactly what scripts/gen_proto.py makes from the .proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _gen_module():
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_stubs_match_the_proto(tmp_path):
    gen = _gen_module()
    written = gen.generate(tmp_path)
    assert [p.name for p in written] == list(gen.GENERATED)
    for path in written:
        committed = REPO / "proto" / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"proto/{path.name} is out of date: run `python scripts/gen_proto.py`"
        )


def test_grpc_stub_imports_messages_package_relatively():
    text = (REPO / "proto" / "partialflow_pb2_grpc.py").read_text()
    assert "from partialflow.proto import partialflow_pb2" in text


def test_values_round_trip():
    from partialflow.proto import partialflow_pb2 as pb
    from partialflow.proto.values import add_rows, decode_rows

    rows = [(1, -(2**63), 2**63 - 1), ("x", "", "ünï"), (1.5, True, None), (False, 0, 0.0)]
    request = pb.WriteRequest(table="t")
    add_rows(request.inserts, rows)
    again = pb.WriteRequest.FromString(request.SerializeToString())
    decoded = decode_rows(again.inserts)
    assert decoded == rows
    # bool stays bool and int stays int (True == 1 in Python, so compare types too)
    assert [type(v) for v in decoded[2]] == [float, bool, type(None)]
    assert [type(v) for v in decoded[3]] == [bool, int, float]


@pytest.mark.parametrize(
    "rows",
    [
        [(1, "a", 1.5, True), (None, None, None, None), (3, "c", 2.5, False)],
        [(1,), ("x",), (None,)],  # mixed types travel as Values
        [(1.0,), (2,)],  # int stays int, float stays float
        [(None,), (None,)],
        [(True, 1), (False, 0)],  # bool is not int
        [(), ()],
        [],
        [(2**63 - 1, -(2**63), float("inf"), "")],
    ],
)
def test_batches_round_trip(rows):
    from partialflow.proto import partialflow_pb2 as pb
    from partialflow.proto.values import decode_batch, fill_batch

    batch = pb.RowBatch()
    assert fill_batch(batch, rows)
    decoded = decode_batch(pb.RowBatch.FromString(batch.SerializeToString()))
    assert decoded == rows
    assert [[type(v) for v in r] for r in decoded] == [[type(v) for v in r] for r in rows]


@pytest.mark.parametrize("rows", [[(1, 2), (3,)], ["ab", "cd"], [5, 6]])
def test_ragged_or_non_sequence_rows_are_not_batched(rows):
    from partialflow.proto import partialflow_pb2 as pb
    from partialflow.proto.values import fill_batch

    batch = pb.RowBatch()
    assert not fill_batch(batch, rows)
    assert batch.ByteSize() == 0


def test_a_malformed_batch_is_refused():
    from partialflow.proto import partialflow_pb2 as pb
    from partialflow.proto.values import decode_batch

    batch = pb.RowBatch(num_rows=3)
    batch.columns.add(kind=pb.Column.INT, ints=[1, 2])
    with pytest.raises(ValueError, match=r"^batch\.columns\[0\]: 2 value\(s\) for 3 rows$"):
        decode_batch(batch)

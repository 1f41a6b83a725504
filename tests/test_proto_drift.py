"""The committed stubs are exactly what scripts/gen_proto.py makes from the .proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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

    rows = [(1, -2**63, 2**63 - 1), ("x", "", "ünï"), (1.5, True, None), (False, 0, 0.0)]
    request = pb.WriteRequest(table="t")
    add_rows(request.inserts, rows)
    again = pb.WriteRequest.FromString(request.SerializeToString())
    decoded = decode_rows(again.inserts)
    assert decoded == rows
    # bool stays bool and int stays int (True == 1 in Python, so compare types too)
    assert [type(v) for v in decoded[2]] == [float, bool, type(None)]
    assert [type(v) for v in decoded[3]] == [bool, int, float]

"""Access control over a real TLS channel: a token on every RPC but health; TLS only.

One in-process server (TLS + token) on the session's Spark serves the whole module.
"""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
from certs import self_signed
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import InProcessServer

from partialflow.client import Client, Unauthenticated, Unavailable

TOKEN = "correct-horse-battery-staple"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def secured(spark, tmp_path_factory, tls):
    cert, key = tls
    srv = InProcessServer(
        tmp_path_factory.mktemp("secured") / "data",
        spark,
        tls_cert=str(cert),
        tls_key=str(key),
        auth_token=TOKEN,
    ).start()
    with Client(srv.address, tls_ca=cert, token=TOKEN) as db:
        db.execute("CREATE TABLE acl_t (k TEXT PRIMARY KEY, n BIGINT)")
        db.insert("acl_t", [("a", 1)])
    yield srv
    srv.stop()


def test_the_right_token_over_tls_works(secured, tls):
    with Client(secured.address, tls_ca=tls[0], token=TOKEN) as db:
        lsn = db.insert("acl_t", [("b", 2)])
        assert db.stats()["lsn"] >= lsn
        assert sorted(db.query("SELECT k, n FROM acl_t").rows) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", ""])
def test_a_missing_or_wrong_token_is_refused_and_touches_nothing(secured, tls, token):
    before = secured.engine.storage.last_lsn
    with Client(secured.address, tls_ca=tls[0], token=token) as db:
        with pytest.raises(Unauthenticated, match=r"token|credentials"):
            db.insert("acl_t", [("evil", 666)])
        with pytest.raises(Unauthenticated):
            db.execute("CREATE TABLE acl_evil (k BIGINT)")
        with pytest.raises(Unauthenticated):
            db.stats()
        with pytest.raises(Unauthenticated):
            db.load("acl_t", "/nonexistent.parquet")
    assert secured.engine.storage.last_lsn == before
    assert [t.name for t in secured.engine.storage.tables()] == ["acl_t"]


def test_plain_text_to_a_tls_server_is_refused(secured):
    with Client(secured.address, token=TOKEN, timeout=5) as db, pytest.raises(Unavailable):
        db.stats()


def test_a_certificate_the_client_does_not_trust_is_refused(secured, tmp_path):
    other_cert, _ = self_signed(tmp_path / "other")
    client = Client(secured.address, tls_ca=other_cert, token=TOKEN, timeout=5)
    with client as db, pytest.raises(Unavailable):
        db.stats()


def test_health_answers_without_a_token_but_reflection_needs_one(secured, tls):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    creds = grpc.ssl_channel_credentials(root_certificates=tls[0].read_bytes())
    with grpc.secure_channel(secured.address, creds) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.ServerReflectionInfo(iter([request]), timeout=5))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answers = list(
            stub.ServerReflectionInfo(
                iter([request]), timeout=5, metadata=[("authorization", f"Bearer {TOKEN}")]
            )
        )
        names = {s.name for s in answers[0].list_services_response.service}
        assert "partialflow.v1.Partialflow" in names


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PARTIALFLOW_")}
    return subprocess.run(
        [sys.executable, "-m", "partialflow.client.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environ, **(env or {})},
        check=False,
    )


def test_cli_with_tls_ca_and_token_from_flag_or_environment(secured, tls):
    ca = str(tls[0])
    done = _cli(
        "sql",
        "--server",
        secured.address,
        "--tls-ca",
        ca,
        "--token",
        TOKEN,
        "SELECT k FROM acl_t WHERE k = 'a'",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[2].strip() == "a"
    done = _cli(
        "stats",
        "--json",
        env={
            "PARTIALFLOW_SERVER": secured.address,
            "PARTIALFLOW_TLS_CA": ca,
            "PARTIALFLOW_TOKEN": TOKEN,
        },
    )
    assert done.returncode == 0, done.stderr

    done = _cli("stats", "--server", secured.address, "--tls-ca", ca)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: UNAUTHENTICATED: missing credentials")
    assert len(done.stderr.strip().splitlines()) == 1
    done = _cli("stats", "--server", secured.address, "--tls-ca", ca, "--token", "nope")
    assert done.returncode == 1 and done.stderr.startswith("error: UNAUTHENTICATED: invalid token")


def test_a_token_without_tls_also_guards_a_plain_server(spark, tmp_path):
    with InProcessServer(tmp_path / "data", spark, auth_token=TOKEN) as srv:
        with Client(srv.address) as db, pytest.raises(Unauthenticated):
            db.execute("CREATE TABLE acl_plain (k BIGINT)")
        with Client(srv.address, token=TOKEN) as db:
            db.execute("CREATE TABLE acl_plain (k BIGINT)")
            assert db.insert("acl_plain", [(1,)]) == 1


def test_unreadable_tls_files_fail_start_up_clearly(spark, tmp_path):
    from partialflow.server.errors import InvalidArgument

    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    srv = InProcessServer(tmp_path / "data", spark, tls_cert=str(bad), tls_key=str(bad))
    with pytest.raises(InvalidArgument, match="not a PEM file"):
        srv.start()
    srv = InProcessServer(
        tmp_path / "data", spark, tls_cert=str(tmp_path / "no.pem"), tls_key=str(bad)
    )
    with pytest.raises(InvalidArgument, match="cannot read the TLS certificate"):
        srv.start()

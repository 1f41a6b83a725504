"""TLS after SSLRequest and SCRAM-SHA-256 with the server's auth token as the password,
on a server of its own (on the session Spark)."""

from __future__ import annotations

import psycopg
import pytest
from certs import self_signed
from helpers import InProcessServer

from partialflow.server.app.main import pg_port_of

TOKEN = "s3cret-token"


def test_tls_and_scram_with_the_token(spark, tmp_path):
    cert, key = self_signed(tmp_path / "certs")
    with InProcessServer(tmp_path / "data", spark, tls_cert=str(cert), tls_key=str(key),
                         auth_token=TOKEN) as srv:
        port = pg_port_of(srv.server)
        dsn = f"host=127.0.0.1 port={port} user=anyone dbname=x connect_timeout=10"
        with psycopg.connect(dsn + f" sslmode=require password={TOKEN}",
                             autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT 42 AS answer").fetchall() == [(42,)]
            conn.execute("CREATE TABLE kv (k BIGINT PRIMARY KEY, v TEXT)")
            conn.execute("INSERT INTO kv VALUES (1, 'one')")
            conn.execute("CREATE VIEW kv_by_k AS SELECT k, v FROM kv WHERE k = ?")
            assert conn.execute("SELECT v FROM kv_by_k WHERE k = 1").fetchall() == [("one",)]
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(dsn + " sslmode=require password=wrong")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn + " sslmode=disable")  # no password: refused too


def test_no_tls_answers_n(server, pg_port):
    dsn = f"host=127.0.0.1 port={pg_port} user=u dbname=x connect_timeout=10"
    with psycopg.connect(dsn + " sslmode=prefer", autocommit=True) as conn:
        assert not conn.pgconn.ssl_in_use
        assert conn.execute("SHOW server_version").fetchone()[0].startswith("15")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn + " sslmode=require")

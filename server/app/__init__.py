"""The gRPC application: what turns an engine into a server.

``main`` assembles a server (``create_server``, ``serve``); ``service`` translates
requests and answers (``answers`` the typed statistics); ``standard`` adds health and
reflection; ``auth`` the bearer token and TLS; ``metrics`` and ``logs`` the Prometheus
endpoint and structured logs; ``testhooks`` the test-only service. Nothing below this
package imports from it.
"""

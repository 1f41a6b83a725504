"""The test and benchmark harness: what tests/ and bench/ start servers with.

``inprocess.InProcessServer`` runs a server in the calling process on a Spark session the
caller already has and hands out connected clients. It sits above the client in the
layers (it imports both the server and the client), so nothing in the server or the
client imports it. The fault hooks a running server offers (``PARTIALFLOW_TEST_HOOKS=1``)
stay in the server (``server/app/testhooks.py``): a ``partialflow serve`` process must
offer them without this package.
"""

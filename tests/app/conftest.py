"""tests/app: the wire contract from outside (raw gRPC stubs, a protocol fuzz test). The
fuzz test's count of messages is printed in every run's summary by tests/conftest.py."""

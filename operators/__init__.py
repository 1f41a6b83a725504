"""Operators: pure incremental computation over deltas. They never call Spark, caches or gRPC."""

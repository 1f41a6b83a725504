"""The partialflow server: storage, dataflow coordination, upqueries and the gRPC service."""

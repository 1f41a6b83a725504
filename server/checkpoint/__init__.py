"""Checkpoint files: where dataflow state is written at consistent cuts, and read back.

* ``files`` — data files (framed, checksummed chunks), manifests, the writer thread;
* ``merge`` — the records a chunk holds and how a chain of files merges into contents;
* ``store`` — the directory: taking checkpoints, retention, compaction, loading the newest
  valid one.

What is captured, and when, is the dataflow's business (``server.dataflow.checkpointer``);
this package only stores it. It imports nothing of the dataflow.
"""

from partialflow.server.checkpoint.files import CorruptCheckpoint, Manifest, catalog_version
from partialflow.server.checkpoint.merge import Contents
from partialflow.server.checkpoint.store import CheckpointStore

__all__ = ["CheckpointStore", "Contents", "CorruptCheckpoint", "Manifest", "catalog_version"]

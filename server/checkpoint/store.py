"""The checkpoint directory: taking checkpoints in the background, retention, compaction
of the incremental chain, and finding the newest valid checkpoint at start.

* Each checkpoint's data file holds only what changed since the previous one; its manifest
  lists the whole chain. When the incremental files of a chain outgrow its full file (or
  the chain gets long), the chain is merged offline into one full file with the same LSN
  (like Samza's changelog compaction): recovery then reads about the size of the state,
  not the history.
* The newest ``KEEP`` checkpoints are kept, so a damaged newest one falls back to the one
  before; files no kept manifest names are deleted. ``on_retained(lsn)`` tells storage the
  oldest kept checkpoint's LSN: the write-ahead log is kept from there on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from partialflow.server.checkpoint import merge
from partialflow.server.checkpoint.files import (
    ChainWriter,
    CorruptCheckpoint,
    DataFile,
    FileRef,
    Manifest,
    list_manifests,
    manifest_name,
    read_manifest,
    write_manifest,
)

log = logging.getLogger("partialflow.checkpoint")

KEEP = 2  # checkpoints kept: the newest, and one to fall back to
MAX_CHAIN = 8  # files in a chain before it is compacted whatever their size

Done = Callable[[Manifest | None, BaseException | None], None]


class CheckpointStore:
    def __init__(self, directory: Path, on_retained: Callable[[int], None] | None = None,
                 chunk_delay: float = 0.0) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        for tmp in self.dir.glob("*.tmp"):
            # An interrupted write (a crash or kill in the middle of a checkpoint): no
            # manifest names it, so it never was part of a checkpoint.
            log.info("removing unfinished checkpoint file %s", tmp.name)
            tmp.unlink(missing_ok=True)
        self.on_retained = on_retained
        self._lock = threading.Lock()
        manifests = list_manifests(self.dir)
        self._seq = manifests[0][0] if manifests else 0
        self.head: Manifest | None = None  # the newest committed checkpoint (writer thread)
        self.writer = ChainWriter(chunk_delay)
        self.compactions = 0

    def close(self) -> None:
        self.writer.close()

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    # -- finding one at start ------------------------------------------------------------
    def newest_lsn(self) -> int | None:
        """The LSN of the oldest checkpoint kept (so recovery can fall back that far), from
        the manifests alone; None if there are none. Storage keeps its log from there."""
        lsns = []
        for _, path in list_manifests(self.dir)[:KEEP]:
            try:
                lsns.append(read_manifest(path).lsn)
            except CorruptCheckpoint:
                continue
        return min(lsns) if lsns else None

    def load(
        self, usable: Callable[[Manifest], str | None]
    ) -> tuple[Manifest, merge.Contents] | None:
        """The newest checkpoint that is intact and ``usable`` (None, or why not), with its
        states' contents; each one skipped is logged with the reason."""
        for seq, path in list_manifests(self.dir):
            try:
                m = read_manifest(path)
                why = usable(m)
                if why is not None:
                    log.warning("checkpoint %d (LSN %d) skipped: %s", seq, m.lsn, why)
                    continue
                contents = merge.load_chain(self.dir, m)
            except CorruptCheckpoint as e:
                log.warning("checkpoint %d skipped: %s", seq, e)
                continue
            self.head = m
            return m, contents
        return None

    # -- taking one (chunks come from the executor, the rest runs on the writer) ----------
    def begin(self, seq: int) -> None:
        self.writer.open(self.dir, seq)

    def add(self, chunk: merge.Chunk) -> int:
        payload = merge.dumps(chunk)
        self.writer.chunk(payload)
        return len(payload)

    def abort(self) -> None:
        self.writer.abort()

    def commit(self, template: Manifest, incremental: bool, done: Done) -> None:
        """Publish the open file as checkpoint ``template`` (its ``files`` are filled in:
        the head's chain plus this file when ``incremental``)."""

        def make(ref: FileRef) -> Manifest:
            if incremental and self.head is None:
                raise RuntimeError("an incremental checkpoint needs one before it")
            base = self.head.files if incremental and self.head is not None else []
            template.files = [*base, ref]
            template.bytes_written = ref.bytes
            template.created = time.time()
            return template

        def after(m: Manifest | None, error: BaseException | None) -> None:
            if m is not None:
                self.head = m
                self._retain()
                if self._needs_compaction(m):
                    self._compact(m)
            done(m, error)

        self.writer.finish(make, after)

    # -- background housekeeping (writer thread) -----------------------------------------
    def _needs_compaction(self, m: Manifest) -> bool:
        if len(m.files) <= 1:
            return False
        return len(m.files) > MAX_CHAIN or sum(f.bytes for f in m.files[1:]) > m.files[0].bytes

    def _compact(self, m: Manifest) -> None:
        """Merge ``m``'s chain into one full file: a new checkpoint at the same LSN."""
        t0 = time.monotonic()
        seq = self.next_seq()
        try:
            f = DataFile(self.dir, seq)
        except OSError as e:  # e.g. no space (or inodes) left: the chain stays as it is
            log.error("compacting checkpoint %d failed: %s; its chain stays", m.seq, e)
            return
        try:
            contents = merge.load_chain(self.dir, m)
            for chunk in merge.full_chunks(contents):
                f.append(merge.dumps(chunk))
            ref = f.commit()
            c = Manifest(seq, m.lsn, "compacted", [ref], m.views, m.tables, m.states,
                         m.catalog_version, created=m.created, duration_s=time.monotonic() - t0,
                         bytes_written=ref.bytes, extra={**m.extra, "compacted_from": m.seq})
            write_manifest(self.dir, c)
        except BaseException:
            if not (self.dir / manifest_name(seq)).exists():
                f.abort()  # e.g. no space: nothing names the new file, so it goes
            log.exception("compacting checkpoint %d failed; its chain stays", m.seq)
            return
        self.head = c
        self.compactions += 1
        log.info("checkpoint chain of %d files compacted into %s (%d bytes, LSN %d) in %.2f s",
                 len(m.files), ref.name, ref.bytes, m.lsn, c.duration_s)
        self._retain()

    def _retain(self) -> None:
        """Keep the newest KEEP manifests and the files they name; delete the rest."""
        kept: list[Manifest] = []
        for _, path in list_manifests(self.dir):
            if len(kept) < KEEP:
                try:
                    kept.append(read_manifest(path))
                    continue
                except CorruptCheckpoint:
                    pass
            path.unlink(missing_ok=True)
        names = {f.name for m in kept for f in m.files} | {manifest_name(m.seq) for m in kept}
        for p in self.dir.iterdir():
            if p.name not in names and p.suffix in (".ckpt", ".json"):
                p.unlink(missing_ok=True)
        if kept and self.on_retained is not None:
            self.on_retained(min(m.lsn for m in kept))

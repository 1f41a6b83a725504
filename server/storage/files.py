"""The file set: the manifest (published segments per table, horizons, flushed LSN), the pins
of open snapshots, and the segment files waiting to be deleted once nothing reads them.

Its data is guarded by the storage lock (see ``memtable.py`` for why that one lock is shared);
methods ending in ``_locked`` are called with it held, the others take it themselves. Its own
``changing()`` lock serializes manifest changes (flush, compaction swap, drop): always taken
before the storage lock, never while holding it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from pathlib import Path

from partialflow.server.storage.catalog import Manifest, TableManifest

log = logging.getLogger(__name__)


class _EmptyTM:
    horizon = 0
    segments: tuple = ()


EMPTY_TABLE = _EmptyTM()


class FileSet:
    def __init__(self, lock: threading.Lock, manifest_path: Path, manifest: Manifest,
                 live_names: Callable[[], set[str]]) -> None:
        self._lock = lock  # the storage lock (shared)
        self._manifest_lock = threading.Lock()
        self.manifest_path = manifest_path
        self._manifest = manifest
        self._live_names = live_names  # lower-cased names of live tables (their dirs stay)
        self._pins: Counter[int] = Counter()
        self._file_refs: Counter[str] = Counter()
        self._obsolete: set[str] = set()
        # Releases of snapshots that were garbage-collected without close(); a finalizer may
        # run while this thread holds the storage lock, so it only appends here.
        self._leaked: deque[tuple[int, list[str]]] = deque()
        self._obsolete_ready: list[str] = []  # unreferenced obsolete files found under the lock

    def changing(self) -> threading.Lock:
        """The lock that serializes manifest changes (taken before the storage lock)."""
        return self._manifest_lock

    # ------------------------------------------------------------------ the manifest
    @property
    def flushed_lsn(self) -> int:
        return self._manifest.flushed_lsn

    @property
    def upstream_lsn(self) -> int | None:
        return self._manifest.upstream_lsn

    def table(self, tid: int) -> TableManifest | _EmptyTM:
        """A table's published segments and horizon (empty if it has none)."""
        return self._manifest.tables.get(tid, EMPTY_TABLE)

    def segment_counts(self) -> dict[int, int]:
        return {tid: len(tm.segments) for tid, tm in self._manifest.tables.items()}

    def copy_locked(self) -> Manifest:
        return self._manifest.copy()

    def save(self, manifest: Manifest) -> None:
        """Write ``manifest`` durably (under ``changing()``); ``publish_locked`` makes it
        current."""
        manifest.save(self.manifest_path)

    def publish_locked(self, manifest: Manifest) -> None:
        self._manifest = manifest

    def named_on_disk(self) -> set[str] | None:
        """Segment files the manifest on disk names (None: unreadable now)."""
        try:
            on_disk = Manifest.load(self.manifest_path)
        except Exception:
            return None
        return {s.file for tm in on_disk.tables.values() for s in tm.segments}

    def discard_unpublished(self, files: Iterable[Path]) -> None:
        """Delete new segment files a failed flush or compaction wrote, unless the manifest on
        disk names them (its rename happened before the failure: recovery then owns them)."""
        files = list(files)
        if not files:
            return
        named = self.named_on_disk()
        if named is None:  # unreadable now: keep them, the next open removes what is unnamed
            log.warning("could not read %s; leaving %d new segment files for recovery",
                        self.manifest_path, len(files))
            return
        for path in files:
            if path.name not in named:
                path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ pins and releases
    @property
    def pinned(self) -> int:
        return sum(self._pins.values())

    def oldest_pin_locked(self) -> int | None:
        return min(self._pins) if self._pins else None

    def pin_locked(self, lsn: int, paths: Iterable[str]) -> None:
        """A snapshot at ``lsn`` reads ``paths``: keep them and hold compaction's horizon."""
        for path in paths:
            self._file_refs[path] += 1
        self._pins[lsn] += 1

    def ref_locked(self, paths: Iterable[str]) -> None:
        for p in paths:
            self._file_refs[p] += 1

    def unref_locked(self, paths: Iterable[str]) -> None:
        for p in paths:
            self._file_refs[p] -= 1
            if self._file_refs[p] <= 0:
                del self._file_refs[p]

    def retire_locked(self, paths: Iterable[str]) -> None:
        """Files no longer in the manifest: deleted once no snapshot reads them."""
        self._obsolete.update(paths)

    def leaked(self, lsn: int, paths: list[str]) -> None:
        """A snapshot was garbage-collected open: queue its release (no lock: a finalizer)."""
        self._leaked.append((lsn, paths))

    def release(self, lsn: int, paths: list[str]) -> None:
        """A snapshot closed: unpin it and delete what nothing reads any more."""
        self._leaked.append((lsn, paths))
        with self._lock:
            doomed = self.drain_locked()
        self.delete_files(doomed)

    def note_leaks_locked(self) -> None:
        """Apply queued releases of leaked snapshots; the files they free go at the next
        collection."""
        if self._leaked:
            self._obsolete_ready.extend(self.drain_locked())

    def drain_locked(self) -> list[str]:
        """Apply queued snapshot releases; returns files now deletable (the caller deletes
        them after releasing the lock)."""
        while self._leaked:
            lsn, paths = self._leaked.popleft()
            self._pins[lsn] -= 1
            if self._pins[lsn] <= 0:
                del self._pins[lsn]
            self.unref_locked(paths)
        return self.collect_locked()

    def collect_locked(self) -> list[str]:
        """Obsolete segment files no open snapshot reads any more."""
        doomed = [p for p in self._obsolete if p not in self._file_refs] + self._obsolete_ready
        self._obsolete.difference_update(doomed)
        self._obsolete_ready = []
        return doomed

    def delete_files(self, paths: Iterable[str]) -> None:
        """Remove obsolete segment files; drop a table directory once its table is gone and
        empty. Called without the storage lock."""
        parents = set()
        for p in paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
            parents.add(os.path.dirname(p))
        if not parents:
            return
        live = self._live_names()
        for d in parents:
            if os.path.basename(d) not in live:
                try:
                    os.rmdir(d)
                except OSError:
                    pass

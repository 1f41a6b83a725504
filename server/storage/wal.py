"""Write-ahead log: framed, checksummed records in rotating files named by their first LSN.

Frame:   <u32 payload length><u32 crc32(payload)><payload>
Payload: <u64 lsn><u32 table id | MORE><u32 number of deletes><Arrow IPC record batch body>

A write over several tables (a transaction) is several frames with one LSN, one per table,
all but the last with the MORE bit set in the table id; they are appended with one write()
and one fdatasync. Reading treats them as one record: a group whose last frame is missing or
damaged (a crash in the middle of the write) is cut off whole, like a torn single frame, so
recovery finds a transaction all there or not at all. A frame for table ``META_TABLE`` carries
no rows: its body is empty (a write with no table) or the write's upstream LSN (u64).

The row data is an Arrow record batch (deletes first, then inserts) serialized without its
schema; the schema is the table's, from the catalog, keyed by the table id. Arrow round-trips
int64/float64/utf8/bool/null exactly and costs a fraction of JSON per row; the very same batch
object becomes the memtable entry and later the Parquet segment, so rows are encoded once.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from partialflow.server.errors import FailedPrecondition
from partialflow.server.storage.space import SPACE_ERRNOS

log = logging.getLogger(__name__)

_FRAME = struct.Struct("<II")
_HEAD = struct.Struct("<QII")
FRAME_OVERHEAD = _FRAME.size + _HEAD.size
_MAX_PAYLOAD = 1 << 31
MORE = 1 << 31  # in a frame's table id: the next frame belongs to the same write
META_TABLE = MORE - 1  # table id of a frame that carries no rows (never a catalog id)
_UPSTREAM = struct.Struct("<Q")


def encode_upstream(upstream_lsn: int | None) -> bytes:
    """The body of a META_TABLE frame."""
    return b"" if upstream_lsn is None else _UPSTREAM.pack(upstream_lsn)


def decode_upstream(body: bytes | memoryview) -> int | None:
    return _UPSTREAM.unpack(body)[0] if len(body) == _UPSTREAM.size else None


class WalFull(OSError):
    """The log ran out of space during a write(); the partial write was undone."""


def wal_file_name(first_lsn: int) -> str:
    return f"{first_lsn:020d}.log"


def encode_frame(
    lsn: int, table_id: int, ndel: int, body: bytes | memoryview, more: bool = False
) -> list:
    """One WAL frame as a list of buffers (for ``b"".join``: the body is never copied twice).
    ``more``: another frame of the same write follows."""
    head = _HEAD.pack(lsn, table_id | MORE if more else table_id, ndel)
    crc = zlib.crc32(body, zlib.crc32(head))
    return [_FRAME.pack(len(head) + len(body), crc), head, body]


@dataclass
class WalEntry:
    lsn: int
    table_id: int
    ndel: int
    body: memoryview
    more: bool = False  # the next entry is part of the same write (same LSN)


def list_wal_files(wal_dir: Path) -> list[tuple[int, Path]]:
    """(first LSN, path) of every WAL file, in LSN order."""
    out = []
    for p in wal_dir.iterdir():
        if p.suffix == ".log" and p.stem.isdigit():
            out.append((int(p.stem), p))
    out.sort()
    return out


def read_wal(wal_dir: Path, repair: bool = True) -> Iterator[WalEntry]:
    """Yield every intact record in LSN order, truncating a torn or corrupt tail.

    A bad frame can only legitimately be at the end of the newest file (the committer only
    ever appends there, and a record is acknowledged only after its fsync): it is truncated.
    A bad frame anywhere else means acknowledged data is damaged, so opening is refused.
    ``repair=False`` reads a log that is open for appending: it stops at a bad frame in the
    newest file (a record being appended) instead of truncating it.
    """
    files = list_wal_files(wal_dir)
    prev_next: int | None = None
    for idx, (first, path) in enumerate(files):
        if prev_next is not None and first != prev_next:
            raise FailedPrecondition(
                f"write-ahead log files are not contiguous: {path.name} follows a file ending "
                f"at LSN {prev_next - 1}; refusing to open"
            )
        data = path.read_bytes()
        view = memoryview(data)
        pos = 0
        expect = first
        group: list[WalEntry] = []  # frames of a write whose last frame is not read yet
        start = 0  # offset of the write being read
        bad = None
        while pos < len(data):
            if not group:
                start = pos
            if len(data) - pos < FRAME_OVERHEAD:
                bad = "short frame header"
            else:
                length, crc = _FRAME.unpack_from(data, pos)
                end = pos + _FRAME.size + length
                if length < _HEAD.size or length > _MAX_PAYLOAD:
                    bad = f"bad frame length {length}"
                elif end > len(data):
                    bad = "frame runs past end of file"
                elif zlib.crc32(view[pos + _FRAME.size : end]) != crc:
                    bad = "checksum mismatch"
            if bad is None:
                lsn, table_id, ndel = _HEAD.unpack_from(data, pos + _FRAME.size)
                want = group[0].lsn if group else expect
                if lsn != want:
                    bad = f"LSN {lsn} where {want} was expected"
            if bad is not None:
                break
            entry = WalEntry(lsn, table_id & ~MORE, ndel, view[pos + FRAME_OVERHEAD : end],
                             bool(table_id & MORE))
            pos = end
            group.append(entry)
            if not entry.more:
                yield from group
                group = []
                expect = lsn + 1
        if bad is None and group:
            bad = f"write at LSN {group[0].lsn} ends after {len(group)} of its frames"
        if bad is not None:
            if idx != len(files) - 1:
                raise FailedPrecondition(
                    f"write-ahead log {path} is corrupt at offset {start} ({bad}) and is not "
                    "the newest log file; refusing to open (acknowledged writes would be lost)"
                )
            if repair:
                # The whole write goes, not just its damaged frame: it was never
                # acknowledged (that waits for the fsync of all its frames).
                log.warning("truncating torn WAL tail of %s at offset %d (%s)", path, start, bad)
                with open(path, "r+b") as f:
                    f.truncate(start)
                    f.flush()
                    os.fsync(f.fileno())
        prev_next = expect


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class WalWriter:
    """Appends groups of frames to the newest WAL file; only the committer thread calls append."""

    def __init__(self, wal_dir: Path, next_lsn: int, rotate_bytes: int) -> None:
        self.dir = wal_dir
        self.rotate_bytes = rotate_bytes
        self.fsyncs = 0
        self._next_lsn = next_lsn  # the LSN the next appended record will carry
        files = list_wal_files(wal_dir)
        if files and files[-1][0] != next_lsn and files[-1][1].stat().st_size == 0:
            # An empty newest file (crash right after a rotation) must be named by the LSN
            # that will actually be written into it next, or replay would reject it.
            files.pop()[1].unlink()
        if not files:
            path = wal_dir / wal_file_name(next_lsn)
            path.touch()
            fsync_dir(wal_dir)
            files = [(next_lsn, path)]
        self._files: list[tuple[int, Path]] = files
        _, path = files[-1]
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._size = os.fstat(self._fd).st_size
        self._closed_bytes = sum(p.stat().st_size for _, p in files[:-1])

    @property
    def total_bytes(self) -> int:
        return self._closed_bytes + self._size

    @property
    def file_count(self) -> int:
        return len(self._files)

    def append(self, data: bytes, next_lsn: int) -> None:
        """Write ``data`` with one write() and make it durable with one fdatasync().

        A write() that fails for lack of space (ENOSPC, EDQUOT) is undone: the file is cut
        back to its last good end and ``WalFull`` is raised, so the caller can refuse the
        group (nothing of it was acknowledged, and the log ends where it ended before).
        Any other failure raises OSError and is fatal to the caller. In particular a failed
        fdatasync is never retried or undone: after it the kernel may have dropped the dirty
        pages and cleared the error (Linux does), so neither this file's contents nor a
        later fsync's success can be trusted; only a restart, which reads the log back from
        disk, knows what is durable (PostgreSQL's "fsyncgate" rule).
        """
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as err:
            if err.errno not in SPACE_ERRNOS:
                raise
            self._undo(err)
            raise WalFull(err.errno, os.strerror(err.errno)) from err
        # fdatasync is enough: it also persists the file size that the appended data needs.
        os.fdatasync(self._fd)
        self.fsyncs += 1
        self._size += len(data)
        self._next_lsn = next_lsn

    def _undo(self, err: OSError) -> None:
        """Cut the file back to the end of its last complete group (the part of the group
        written before space ran out was never fsynced nor acknowledged). Truncating frees
        blocks, so it does not need space; if it fails anyway the error is fatal."""
        os.ftruncate(self._fd, self._size)
        # Made durable at once: otherwise a crash could leave the undone group's complete
        # frames on disk, and recovery would replay writes that were refused.
        os.fsync(self._fd)
        log.warning("WAL append ran out of space (%s); cut %s back to %d bytes",
                    err.strerror, self._files[-1][1].name, self._size)

    def maybe_rotate(self, force: bool = False) -> None:
        """Start a new file (named by the next LSN) once the current one is large enough,
        or now if ``force`` and it holds anything (on a full disk, so that truncation can
        delete the flushed records instead of waiting for ``rotate_bytes`` of them)."""
        if self._size < self.rotate_bytes and not (force and self._size > 0):
            return
        next_lsn = self._next_lsn
        path = self.dir / wal_file_name(next_lsn)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fsync_dir(self.dir)
        except OSError:  # leave no half-made file behind; the caller retries later
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        os.close(self._fd)
        self._fd = fd
        self._closed_bytes += self._size
        self._size = 0
        self._files.append((next_lsn, path))

    def coverable(self, lsn: int) -> int:
        """How many closed files hold only records with LSN <= ``lsn``."""
        n = 0
        while n + 1 < len(self._files) and self._files[n + 1][0] - 1 <= lsn:
            n += 1
        return n

    def delete_covered(self, lsn: int) -> int:
        """Delete closed files whose every record has LSN <= ``lsn``; returns files deleted."""
        deleted = 0
        while len(self._files) > 1 and self._files[1][0] - 1 <= lsn:
            _, path = self._files.pop(0)
            size = path.stat().st_size
            path.unlink()
            self._closed_bytes -= size
            deleted += 1
        if deleted:
            fsync_dir(self.dir)
        return deleted

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


class Wal:
    """The log as the storage's parts share it: the committer appends (one write + one
    fdatasync per group), the flusher rotates and deletes covered files. Its own lock
    serializes them; it is never held while taking another lock."""

    def __init__(self, writer: WalWriter) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self.dir = writer.dir

    @property
    def fsyncs(self) -> int:
        return self._writer.fsyncs

    @property
    def total_bytes(self) -> int:
        return self._writer.total_bytes

    @property
    def file_count(self) -> int:
        return self._writer.file_count

    def append(self, data: bytes, next_lsn: int) -> None:
        """See ``WalWriter.append`` (WalFull when undone for lack of space)."""
        with self._lock:
            self._writer.append(data, next_lsn)

    def maybe_rotate(self, force: bool = False) -> None:
        with self._lock:
            self._writer.maybe_rotate(force)

    def truncate(self, safe: int, before_delete: Callable[[], None]) -> int:
        """Delete the closed files whose records all have LSN <= ``safe``, calling
        ``before_delete`` first (the row index is made durable) when there are any."""
        with self._lock:
            if not self._writer.coverable(safe):
                return 0
        before_delete()
        with self._lock:
            return self._writer.delete_covered(safe)

    def start(self, default: int) -> int:
        """The first LSN the log holds (``default`` when it holds none)."""
        with self._lock:
            files = list_wal_files(self.dir)
        for first, path in files:
            if path.stat().st_size > 0:
                return first
        return default

    def close(self) -> None:
        with self._lock:
            self._writer.close()

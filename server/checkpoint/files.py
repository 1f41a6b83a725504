"""Checkpoint files on disk: framed data files and the manifests that make them a checkpoint.

A checkpoint is a *chain* of data files, a full one first and then incremental ones, each
holding the changes captured at one consistent cut. Its manifest names the chain with every
file's size and SHA-256, the cut's LSN, the views and table ids the states belong to, and
is itself checksummed. A checkpoint exists once its manifest is renamed into place; until
then it is invisible, so a crash at any moment leaves the previous one intact.

Data file:  frames of ``<u32 length><u32 crc32(payload)><payload>``; a payload is one
pickled chunk, a list of ``(state signature, [record, ...])`` (records: ``merge.py``).

Files are written by one background thread (``ChainWriter``): the executor hands it the
pickled chunks and goes on with writes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("partialflow.checkpoint")

FORMAT = 1
_FRAME = struct.Struct("<II")


def fsync_dir(path: Path) -> None:
    """Make renames in ``path`` durable. (Storage has the same six lines; importing them
    would load the storage package, and with it pyspark, into the JVM-free dataflow.)"""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def data_name(seq: int) -> str:
    return f"data-{seq:08d}.ckpt"


def manifest_name(seq: int) -> str:
    return f"manifest-{seq:08d}.json"


class CorruptCheckpoint(Exception):
    """A checkpoint file is missing, torn or fails its checksum."""


@dataclass
class FileRef:
    name: str
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "bytes": self.bytes, "sha256": self.sha256}


@dataclass
class Manifest:
    """One checkpoint: a chain of files, exact at ``lsn``."""

    seq: int
    lsn: int
    kind: str  # "full", "incremental" or "compacted"
    files: list[FileRef]
    views: list[tuple[str, str]]  # (name, sql) of the views whose states it holds
    tables: dict[str, int]  # table name -> catalog id at the cut
    states: dict[str, str]  # signature -> label, of the states live at the cut
    catalog_version: str
    created: float = 0.0  # wall clock, for age
    duration_s: float = 0.0
    bytes_written: int = 0  # by this checkpoint (its own file), not the chain
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = {
            "format": FORMAT, "seq": self.seq, "lsn": self.lsn, "kind": self.kind,
            "files": [f.to_json() for f in self.files], "views": [list(v) for v in self.views],
            "tables": self.tables, "states": self.states,
            "catalog_version": self.catalog_version, "created": self.created,
            "duration_s": self.duration_s, "bytes_written": self.bytes_written,
            "extra": self.extra,
        }
        body["checksum"] = _digest(body)
        return body

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Manifest:
        if obj.get("format") != FORMAT:
            raise CorruptCheckpoint(f"unknown format {obj.get('format')!r}")
        want = obj.pop("checksum", None)
        if want != _digest(obj):
            raise CorruptCheckpoint("manifest checksum mismatch")
        return Manifest(
            seq=int(obj["seq"]), lsn=int(obj["lsn"]), kind=str(obj["kind"]),
            files=[FileRef(f["name"], int(f["bytes"]), f["sha256"]) for f in obj["files"]],
            views=[(str(n), str(s)) for n, s in obj["views"]],
            tables={str(k): int(v) for k, v in obj["tables"].items()},
            states={str(k): str(v) for k, v in obj["states"].items()},
            catalog_version=str(obj["catalog_version"]), created=float(obj["created"]),
            duration_s=float(obj["duration_s"]), bytes_written=int(obj["bytes_written"]),
            extra=dict(obj.get("extra") or {}),
        )


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def catalog_version(tables: dict[str, int], views: list[tuple[str, str]]) -> str:
    """A fingerprint of the catalog a checkpoint was taken under (tables by id, views)."""
    text = json.dumps([sorted(tables.items()), sorted(views)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- reading --------------------------------------------------------------------------------
def list_manifests(directory: Path) -> list[tuple[int, Path]]:
    """(seq, path) of every manifest, newest first."""
    out = []
    for p in directory.glob("manifest-*.json"):
        stem = p.stem.removeprefix("manifest-")
        if stem.isdigit():
            out.append((int(stem), p))
    return sorted(out, reverse=True)


def read_manifest(path: Path) -> Manifest:
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:
        raise CorruptCheckpoint(f"{path.name}: unreadable ({e})") from None
    if not isinstance(obj, dict):
        raise CorruptCheckpoint(f"{path.name}: not a manifest")
    try:
        return Manifest.from_json(obj)
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptCheckpoint(f"{path.name}: malformed ({e})") from None


def read_frames(path: Path, ref: FileRef) -> Iterator[bytes]:
    """The payloads of a data file, after checking its size and SHA-256 against ``ref``."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CorruptCheckpoint(f"{ref.name}: {e.strerror or e}") from None
    if len(data) != ref.bytes:
        raise CorruptCheckpoint(f"{ref.name}: {len(data)} bytes, the manifest says {ref.bytes}")
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise CorruptCheckpoint(f"{ref.name}: SHA-256 mismatch")
    view = memoryview(data)
    pos = 0
    while pos < len(data):
        if len(data) - pos < _FRAME.size:
            raise CorruptCheckpoint(f"{ref.name}: short frame at {pos}")
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if end > len(data) or zlib.crc32(view[pos + _FRAME.size:end]) != crc:
            raise CorruptCheckpoint(f"{ref.name}: bad frame at {pos}")
        yield bytes(view[pos + _FRAME.size:end])
        pos = end


# -- writing --------------------------------------------------------------------------------
class DataFile:
    """A data file being written: frames appended, then fsynced and renamed into place."""

    def __init__(self, directory: Path, seq: int) -> None:
        self.name = data_name(seq)
        self.path = directory / self.name
        self.tmp = directory / (self.name + ".tmp")
        self._f = open(self.tmp, "wb")  # noqa: SIM115 (open until finish/abort)
        self._sha = hashlib.sha256()
        self.bytes = 0

    def append(self, payload: bytes) -> None:
        head = _FRAME.pack(len(payload), zlib.crc32(payload))
        for part in (head, payload):
            self._f.write(part)
            self._sha.update(part)
        self.bytes += len(head) + len(payload)

    def commit(self) -> FileRef:
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            os.replace(self.tmp, self.path)
        except BaseException:  # e.g. no space for the buffered tail: leave nothing behind
            self.abort()
            raise
        return FileRef(self.name, self.bytes, self._sha.hexdigest())

    def abort(self) -> None:
        """Remove the file, written or not (no manifest names it yet)."""
        if not self._f.closed:
            try:
                self._f.close()  # flushes what is buffered: may fail for space again
            except OSError:
                pass
        self.tmp.unlink(missing_ok=True)
        self.path.unlink(missing_ok=True)


def write_manifest(directory: Path, m: Manifest) -> None:
    """Durably publish ``m`` (its data files must be in place, fsynced)."""
    fsync_dir(directory)  # the data files' renames first
    path = directory / manifest_name(m.seq)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps(m.to_json(), indent=1, sort_keys=True).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # not published: the previous checkpoint stays the newest
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)


class ChainWriter:
    """The background thread that writes checkpoints. Jobs are run one at a time in the
    order given: ``chunk`` appends to the open data file, ``finish`` commits it and its
    manifest and calls back, ``task`` runs any function (compaction, retention)."""

    def __init__(self, chunk_delay: float = 0.0) -> None:
        # Seconds slept after each chunk: crash tests stretch a checkpoint's write with it
        # so that a kill lands in the middle of one.
        self.chunk_delay = chunk_delay
        self._jobs: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._file: DataFile | None = None
        self._thread = threading.Thread(target=self._loop, name="pf-checkpoint", daemon=True)
        self._thread.start()

    def open(self, directory: Path, seq: int) -> None:
        self._jobs.put(("open", (directory, seq)))

    def chunk(self, payload: bytes) -> None:
        self._jobs.put(("chunk", payload))

    def finish(self, make: Callable[[FileRef], Manifest], done: Callable[[Manifest | None,
               BaseException | None], None]) -> None:
        """Commit the open file; ``make(ref)`` gives its manifest, which is then
        published; ``done(manifest, error)`` is called on this thread either way."""
        self._jobs.put(("finish", (make, done)))

    def abort(self) -> None:
        self._jobs.put(("abort", None))

    def task(self, fn: Callable[[], None]) -> None:
        self._jobs.put(("task", fn))

    def close(self, timeout: float = 30.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)

    def idle(self) -> bool:
        return self._jobs.unfinished_tasks == 0

    def _loop(self) -> None:
        failed: BaseException | None = None  # the open file's first error, if any
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    if self._file is not None:
                        self._file.abort()
                    return
                kind, arg = job
                if kind == "open":
                    failed = None
                    try:
                        self._file = DataFile(*arg)
                    except OSError as e:
                        failed, self._file = e, None
                elif kind == "chunk":
                    if self._file is not None and failed is None:
                        try:
                            self._file.append(arg)
                        except OSError as e:
                            failed = e
                        if self.chunk_delay:
                            time.sleep(self.chunk_delay)
                elif kind == "finish":
                    make, done = arg
                    self._finish(make, done, failed)
                elif kind == "abort":
                    if self._file is not None:
                        self._file.abort()
                        self._file = None
                elif kind == "task":
                    try:
                        arg()
                    except Exception:
                        log.exception("checkpoint background task failed")
            finally:
                self._jobs.task_done()

    def _finish(self, make: Callable[[FileRef], Manifest],
                done: Callable[[Manifest | None, BaseException | None], None],
                failed: BaseException | None) -> None:
        f, self._file = self._file, None
        manifest: Manifest | None = None
        error = failed
        try:
            if f is None:
                raise error or RuntimeError("no checkpoint file is open")
            if error is not None:
                f.abort()
                raise error
            t0 = time.monotonic()
            ref = f.commit()
            manifest = make(ref)
            manifest.duration_s += time.monotonic() - t0
            try:
                write_manifest(f.path.parent, manifest)
            except BaseException:
                if not (f.path.parent / manifest_name(manifest.seq)).exists():
                    f.abort()  # e.g. no space: a data file no manifest names is garbage
                raise
        except BaseException as e:  # reported to the checkpointer, which logs it
            error, manifest = e, None
        done(manifest, error)

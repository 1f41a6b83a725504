"""Checkpoint records and how a chain of them merges into the states' contents.

A chunk is a list of ``(signature, records)``; records of one state apply in order, and
files of a chain apply oldest first, so the last word about a key wins:

* ``("R",)``               — reset: forget everything said before about this state (a
  state created anew under a signature that was used before);
* ``("F", fk)``            — fill key ``fk`` is filled, starting empty (replaces it);
* ``("H", fk)``            — ``fk`` is a hole;
* ``("I", fk, pairs)``     — in filled ``fk``, set each index key's value (a bag of rows,
  or a group's entry), or remove it (value ``None``);
* ``("T", fk, ref)``       — ``fk`` is filled and shelved in the dataflow's disk tier
  (server/dataflow/tier.py), whose commit the manifest names: row ``ref`` of the tier's
  store holds it (replaces it);
* ``("S", fk, bytes)``     — written by earlier versions (a key's size); ignored: a state
  counts what it restores.

The merged contents: signature -> fill key -> index key -> value.
"""

from __future__ import annotations

import gc
import math
import pickle
import re
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from partialflow.operators.values import NAN
from partialflow.server.checkpoint.files import CorruptCheckpoint, Manifest, read_frames


class Shelved(NamedTuple):
    """A key kept in the disk tier: its row in the tier's store."""

    ref: int


# signature -> fill key -> {index key: value}, or Shelved for a key in the disk tier
Contents = dict[str, dict[Any, Any]]
Chunk = list[tuple[str, list[tuple]]]

# A pickled float that may be NaN: the BINFLOAT opcode, then 8 big-endian bytes whose
# exponent bits are all ones.
_MAYBE_NAN = re.compile(rb"G[\x7f\xff][\xf0-\xff]")


def dumps(chunk: Chunk) -> bytes:
    return pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)


def loads(payload: bytes) -> Chunk:
    chunk: Chunk = load_value(payload)
    return chunk


def load_value(payload: bytes) -> Any:
    """Unpickle what the dataflow pickled (a chunk, a shelved key: dataflow/tier.py), with
    its NaNs made the one ``NAN`` object again."""
    value = pickle.loads(payload)
    return canonical(value) if _has_nan(payload) else value


def _has_nan(payload: bytes) -> bool:
    for m in _MAYBE_NAN.finditer(payload):
        raw = payload[m.start() + 1:m.start() + 9]
        if len(raw) == 8 and math.isnan(struct.unpack(">d", raw)[0]):
            return True
    return False


def canonical(obj: Any) -> Any:
    """``obj`` with every NaN replaced by the one ``NAN`` object the dataflow uses (rows
    compare by identity first: an unpickled NaN would be a row of its own)."""
    if isinstance(obj, float):
        return NAN if obj != obj else obj
    if isinstance(obj, tuple):
        items = [canonical(v) for v in obj]
        # A named tuple (an aggregate's entry) stays one.
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    if isinstance(obj, dict):
        return {canonical(k): canonical(v) for k, v in obj.items()}
    for cls in type(obj).__mro__:  # slotted operator entries (candidates and their keys)
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                setattr(obj, name, canonical(getattr(obj, name)))
    return obj


def apply(contents: Contents, chunk: Chunk) -> None:
    """Apply one chunk's records to ``contents`` (in place)."""
    for sig, records in chunk:
        state = contents.get(sig)
        if state is None:
            state = contents[sig] = {}
        for rec in records:
            tag = rec[0]
            if tag == "I":
                bucket = state.get(rec[1])
                if bucket is None or isinstance(bucket, Shelved):
                    raise CorruptCheckpoint(f"index keys of a hole {rec[1]!r} in state {sig}")
                for ik, value in rec[2]:
                    if value is None:
                        bucket.pop(ik, None)
                    else:
                        bucket[ik] = value
            elif tag == "S":
                pass
            elif tag == "F":
                state[rec[1]] = {}
            elif tag == "T":
                state[rec[1]] = Shelved(rec[2])
            elif tag == "H":
                state.pop(rec[1], None)
            elif tag == "R":
                state.clear()
            else:
                raise CorruptCheckpoint(f"unknown record {tag!r}")


def load_chain(directory: Path, m: Manifest) -> Contents:
    """The states' contents at ``m.lsn`` (only states live then).
    CorruptCheckpoint if any file of the chain is missing, torn or damaged."""
    contents: Contents = {}
    # Millions of small objects come back: without this the cycle collector runs over the
    # growing contents again and again (it doubled the time to load).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for ref in m.files:
            for payload in read_frames(directory / ref.name, ref):
                try:
                    chunk = loads(payload)
                except Exception as e:  # a checksummed frame that won't unpickle
                    raise CorruptCheckpoint(f"{ref.name}: undecodable chunk ({e})") from None
                apply(contents, chunk)
    finally:
        if collecting:
            gc.enable()
    return {sig: contents.get(sig, {}) for sig in m.states}


def full_chunks(contents: Contents, per_chunk: int = 4096) -> Iterator[Chunk]:
    """``contents`` as records of a full checkpoint file (compaction)."""
    chunk: Chunk = []
    n = 0
    for sig, state in contents.items():
        records: list[tuple] = [("R",)]
        chunk.append((sig, records))
        for fk, bucket in state.items():
            if isinstance(bucket, Shelved):
                records.append(("T", fk, bucket.ref))
                continue
            records.append(("F", fk))
            for pairs in _slices(bucket.items(), per_chunk):
                records.append(("I", fk, pairs))
                n += len(pairs)
                if n >= per_chunk:
                    yield chunk
                    records = []
                    chunk = [(sig, records)]
                    n = 0
    if chunk:
        yield chunk


def _slices(items: Iterable[tuple[Any, Any]], size: int) -> Iterator[list[tuple[Any, Any]]]:
    batch: list[tuple[Any, Any]] = []
    for kv in items:
        batch.append(kv)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch

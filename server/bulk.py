"""Bulk loading: Spark reads a Parquet or CSV file, the rows go in as ONE atomic write.

A load is a generator of ``Progress`` events (the service streams them to the client):

    scan     Spark tasks done / total while the file is read
    convert  rows turned into Python tuples
    write    the one storage write (durable, one LSN)
    done     lsn and rows

Restartable: a file's fingerprint (table, path, size, modification time) is recorded in
``<data>/bulk_loads.json`` once its write is acknowledged, and loading the same file again is
refused with AlreadyExists unless forced. Nothing is written before the single atomic write,
so a load that fails, is cancelled or crashes before the acknowledgement leaves nothing behind
and can simply be run again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from partialflow.server.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from partialflow.server.spark_supervisor import generation_of, spark_failure

log = logging.getLogger(__name__)

FORMATS = ("parquet", "csv")
REGISTRY_FILE = "bulk_loads.json"
_CHUNK_ROWS = 100_000
_POLL_SECONDS = 0.25

# Spark type names (DataType.simpleString) a table column type accepts without loss.
_ACCEPTS = {
    "BIGINT": {"bigint", "int", "smallint", "tinyint"},
    "DOUBLE": {"double", "float", "bigint", "int", "smallint", "tinyint"},
    "TEXT": {"string"},
    "BOOLEAN": {"boolean"},
}
_SPARK_NAMES = {"BIGINT": "bigint", "DOUBLE": "double", "TEXT": "string", "BOOLEAN": "boolean"}


@dataclass
class Progress:
    """One step of a load, as streamed to the client."""

    phase: str
    done: int = 0
    total: int = 0
    message: str = ""
    lsn: int = 0
    rows: int = 0


@dataclass(frozen=True)
class Fingerprint:
    """What identifies "the same file" for restarts: where it is, how big, when changed."""

    table: str
    path: str
    size: int
    mtime_ns: int


class LoadRegistry:
    """Fingerprints of completed loads, in a JSON file replaced atomically on each change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[dict[str, Any]] = []
        if path.exists():
            try:
                self._entries = json.loads(path.read_text())["loads"]
            except (OSError, ValueError, KeyError) as err:
                raise FailedPrecondition(f"cannot read the load registry {path}: {err}") from None

    def find(self, fp: Fingerprint) -> dict[str, Any] | None:
        """The recorded load of exactly this file into this table, if any."""
        wanted = asdict(fp)
        for entry in reversed(self._entries):
            if all(entry.get(k) == v for k, v in wanted.items()):
                return entry
        return None

    def record(self, fp: Fingerprint, lsn: int, rows: int) -> None:
        self._entries.append({**asdict(fp), "lsn": lsn, "rows": rows, "at": time.time()})
        self._save()

    def forget_table(self, table: str) -> None:
        """Drop a table's fingerprints (the table was dropped: a new one starts empty)."""
        kept = [e for e in self._entries if e.get("table") != table]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._save()

    def _save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump({"loads": self._entries}, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself must survive a crash
        finally:
            os.close(fd)


def _is_local(path: str) -> bool:
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or len(scheme) == 1  # a Windows drive letter reads as scheme


def _local_path(path: str) -> str:
    return os.path.abspath(urlparse(path).path if path.startswith("file:") else path)


def fingerprint(spark: Any, table: str, path: str) -> Fingerprint:
    """The file's fingerprint; a directory (a Spark dataset) counts all files under it."""
    if _is_local(path):
        local = _local_path(path)
        if not os.path.exists(local):
            raise NotFound(f"no such file or directory: {local}")
        if os.path.isdir(local):
            stats = [os.stat(os.path.join(d, f)) for d, _, fs in os.walk(local) for f in fs]
            size = sum(s.st_size for s in stats)
            mtime = max((s.st_mtime_ns for s in stats), default=os.stat(local).st_mtime_ns)
        else:
            st = os.stat(local)
            size, mtime = st.st_size, st.st_mtime_ns
        return Fingerprint(table, local, size, mtime)
    try:  # any other Spark path: ask Hadoop's FileSystem (classic Spark only)
        jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
        hpath = jvm.org.apache.hadoop.fs.Path(path)
        fs = hpath.getFileSystem(conf)
        if not fs.exists(hpath):
            raise NotFound(f"no such file or directory: {path}")
        size = fs.getContentSummary(hpath).getLength()
        mtime = fs.getFileStatus(hpath).getModificationTime() * 1_000_000
        return Fingerprint(table, path, int(size), int(mtime))
    except (NotFound, Unavailable):  # Unavailable: Spark is down, the load cannot run
        raise
    except Exception as err:  # noqa: BLE001 - any FileSystem failure: fall back
        log.warning("cannot fingerprint %s (%s); restart protection uses the path only", path, err)
        return Fingerprint(table, path, -1, -1)


def _spark_message(err: BaseException) -> str:
    """The useful first line of a Spark/py4j error."""
    text = str(getattr(err, "desc", None) or err).strip()
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("at ", "JVM stacktrace")):
            return line[:500]
    return type(err).__name__


def check_names(table: str, names: list[str], file_names: list[str]) -> None:
    """Refuse a file whose column names are not exactly the table's (in any order), naming
    the first missing or extra column. Names match case-insensitively, as Spark resolves them."""
    have = {name.lower() for name in file_names}
    want = {name.lower() for name in names}
    listing = (
        f"the table's columns are {', '.join(names)}; "
        f"the file's are {', '.join(file_names) or 'none'}"
    )
    missing = [name for name in names if name.lower() not in have]
    if missing:
        raise InvalidArgument(f"load into {table}: the file has no column {missing[0]}; {listing}")
    extra = [name for name in file_names if name.lower() not in want]
    if extra:
        raise InvalidArgument(
            f"load into {table}: the file's column {extra[0]} is not in the table; {listing}"
        )
    if len(file_names) != len(have):
        raise InvalidArgument(f"load into {table}: the file repeats a column name; {listing}")


def check_columns(
    table: str, columns: list[tuple[str, str]], file_fields: list[tuple[str, str]]
) -> None:
    """Refuse a file whose columns or types do not fit the table, naming the mismatch.

    ``columns`` are the table's (name, storage type); ``file_fields`` the file's (name, Spark
    ``simpleString`` type). Integer types widen to BIGINT and DOUBLE; nothing narrows.
    """
    check_names(table, [n for n, _ in columns], [n for n, _ in file_fields])
    kinds = {name.lower(): (name, kind) for name, kind in file_fields}
    for name, ctype in columns:
        file_name, kind = kinds[name.lower()]
        if kind not in _ACCEPTS[ctype]:
            raise InvalidArgument(
                f"load into {table}: column {name} is {ctype} but the file's {file_name} is {kind}"
            )


class BulkLoader:
    """Loads files into tables. Loads run concurrently; the fingerprint check is repeated
    under a lock together with the write and its record, so two loads of the same file
    cannot both get in (the lock is never held across a yield: a client that goes away
    leaves a suspended generator behind, which must not block other loads)."""

    def __init__(self, storage: Any, spark: Any, data_dir: str | os.PathLike) -> None:
        self.storage = storage
        self.spark = spark
        self.registry = LoadRegistry(Path(data_dir).absolute() / REGISTRY_FILE)
        self._lock = threading.Lock()

    def load(
        self,
        table: str,
        path: str,
        write: Callable[[str, list[tuple]], int],
        *,
        fmt: str = "parquet",
        header: bool = False,
        force: bool = False,
        options: Mapping[str, str] | None = None,
        active: Callable[[], bool] = lambda: True,
    ) -> Iterator[Progress]:
        """Load ``path`` into ``table`` with ``write(table, rows) -> lsn``; yields Progress.

        ``active`` is asked before the write: once it says False (the client went away)
        the load stops without writing.
        """
        fmt = (fmt or "parquet").lower()
        if fmt not in FORMATS:
            raise InvalidArgument(f"unknown load format {fmt!r}; formats are {', '.join(FORMATS)}")
        if not path:
            raise InvalidArgument("load: a path is required")
        schema = self.storage.table(table)  # NotFound names the known tables
        generation = generation_of(self.spark)  # the Spark session the load runs on
        fp = fingerprint(self.spark, schema.name, path)
        with self._lock:
            self._refuse_reload(fp, force)
        spark_path = fp.path if _is_local(path) else path
        frame = self._frame(schema, spark_path, fmt, header, options or {}, generation)
        arrow = yield from self._scan(frame, schema.name, generation)
        rows = yield from self._convert(arrow)
        if not active():
            log.info("load cancelled before its write", extra={"table": schema.name})
            return
        lsn = yield from self._write(fp, rows, write, force)
        log.info(
            "bulk load done",
            extra={"table": schema.name, "path": fp.path, "rows": len(rows), "lsn": lsn},
        )
        yield Progress("done", len(rows), len(rows), f"loaded {len(rows)} rows", lsn, len(rows))

    def _write(
        self,
        fp: Fingerprint,
        rows: list[tuple],
        write: Callable[[str, list[tuple]], int],
        force: bool,
    ) -> Generator[Progress, None, int]:
        """The one write (and its record) in a thread, with a heartbeat every second so
        the client's clock moves and idle-stream timeouts do not fire; returns the LSN.

        A client that leaves now does not stop it: the write is atomic and nearly done."""
        message = f"writing {len(rows)} rows as one write"
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                with self._lock:
                    self._refuse_reload(fp, force)
                    box["lsn"] = write(fp.table, rows)
                    self.registry.record(fp, box["lsn"], len(rows))
            except BaseException as err:  # noqa: BLE001 - re-raised on the generator's thread
                box["error"] = err

        worker = threading.Thread(target=run, name="bulk-load-write", daemon=True)
        worker.start()
        yield Progress("write", 0, len(rows), message)
        while worker.is_alive():
            worker.join(1.0)
            if worker.is_alive():
                yield Progress("write", 0, len(rows), message)
        if "error" in box:
            raise box["error"]
        return box["lsn"]

    def forget_table(self, table: str) -> None:
        with self._lock:
            self.registry.forget_table(table)

    def _refuse_reload(self, fp: Fingerprint, force: bool) -> None:
        earlier = self.registry.find(fp)
        if earlier is not None and not force:
            raise AlreadyExists(
                f"{fp.path} was already loaded into {fp.table} at LSN {earlier['lsn']} "
                f"({earlier['rows']} rows; same size and modification time); "
                "load it with force to add its rows again"
            )

    def _frame(
        self, schema: Any, path: str, fmt: str, header: bool, options: Mapping[str, str],
        generation: int = 0,
    ) -> Any:
        """A DataFrame of the file with the table's columns, in its order and types."""
        from pyspark.sql import functions as F

        columns = [(c.name, c.type) for c in schema.columns]
        try:
            if fmt == "csv":
                frame = self._csv(schema, path, header, options)
            else:
                frame = self.spark.read.options(**options).parquet(path)
                fields = [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]
                check_columns(schema.name, columns, fields)
        except (InvalidArgument, NotFound):
            raise
        except Exception as err:  # noqa: BLE001 - a Spark read error, reported below
            # Unless Spark itself is down: then it is no fault of the file (retry later).
            down = spark_failure(self.spark, err, generation)
            if down is not None:
                raise down from None
            raise InvalidArgument(f"cannot read {path} as {fmt}: {_spark_message(err)}") from None
        return frame.select(
            [F.col(f"`{name}`").cast(_SPARK_NAMES[ctype]).alias(name) for name, ctype in columns]
        )

    def _csv(self, schema: Any, path: str, header: bool, options: Mapping[str, str]) -> Any:
        # RFC 4180 quoting: a quote inside a quoted field is doubled, as Python's csv module,
        # pandas, spreadsheets and COPY ... CSV write it (Spark's own default escape is a
        # backslash, which would load "a ""b""" as the raw text). Options can override it.
        reader = self.spark.read.option("escape", '"').options(**options)
        columns = [(c.name, c.type) for c in schema.columns]
        if header:  # check the header's names first, so a mismatch names the column
            names = reader.option("header", True).csv(path).columns
            check_names(schema.name, [n for n, _ in columns], names)
            order = {n.lower(): i for i, n in enumerate(names)}
            file_columns = sorted(columns, key=lambda c: order[c[0].lower()])
        else:
            file_columns = columns
        # FAILFAST: a value that does not parse as its column's type fails the load instead
        # of silently becoming NULL.
        ddl = ", ".join(f"`{n}` {_SPARK_NAMES[t]}" for n, t in file_columns)
        return (
            reader.option("header", header)
            .option("mode", "FAILFAST")
            .option("enforceSchema", True)
            .schema(ddl)
            .csv(path)
        )

    def _scan(self, frame: Any, table: str, generation: int = 0
              ) -> Generator[Progress, None, Any]:
        """Run the Spark job in a thread, reporting task progress; returns an Arrow table."""
        group = f"partialflow-load-{uuid.uuid4().hex[:12]}"
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                sc = self._context()
                if sc is not None:
                    sc.setJobGroup(group, f"partialflow load into {table}", True)
                else:  # Spark Connect: no job groups, but a tag (of this thread only) cancels it
                    self.spark.addTag(group)
                box["arrow"] = frame.toArrow()
            except BaseException as err:  # noqa: BLE001 - handed to the generator's thread
                box["error"] = err

        worker = threading.Thread(target=run, name="bulk-load-scan", daemon=True)
        worker.start()
        last = None
        try:
            while worker.is_alive():
                worker.join(_POLL_SECONDS)
                done, total = self._tasks(group)
                if (done, total) != last and total:
                    last = (done, total)
                    yield Progress("scan", done, total, "reading with Spark")
        except GeneratorExit:  # the client went away: stop the Spark job too
            self._cancel(group)
            raise
        if "error" in box:
            err = box["error"]
            down = spark_failure(self.spark, err, generation)
            if down is not None:
                raise down from None
            raise InvalidArgument(f"cannot load into {table}: {_spark_message(err)}") from None
        return box["arrow"]

    def _convert(self, arrow: Any) -> Generator[Progress, None, list[tuple]]:
        """Arrow columns to row tuples in chunks, reporting rows converted; returns the rows."""
        total = arrow.num_rows
        rows: list[tuple] = []
        yield Progress("convert", 0, total, "converting rows")
        for start in range(0, total, _CHUNK_ROWS):
            chunk = arrow.slice(start, _CHUNK_ROWS)
            rows.extend(zip(*(column.to_pylist() for column in chunk.columns), strict=True))
            yield Progress("convert", len(rows), total, "converting rows")
        return rows

    def _context(self) -> Any:
        try:
            return self.spark.sparkContext
        except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext: no progress
            return None

    def _tasks(self, group: str) -> tuple[int, int]:
        sc = self._context()
        if sc is None:
            return 0, 0
        try:
            tracker = sc.statusTracker()
            done = total = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else ():
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        done += stage.numCompletedTasks
                        total += stage.numTasks
            return done, total
        except Exception:  # noqa: BLE001 - progress is best effort
            return 0, 0

    def _cancel(self, group: str) -> None:
        sc = self._context()
        try:
            if sc is not None:
                sc.cancelJobGroup(group)
            else:
                self.spark.interruptTag(group)
        except Exception:
            log.warning("could not cancel Spark job group %s", group, exc_info=True)


__all__ = ["BulkLoader", "Fingerprint", "LoadRegistry", "Progress", "check_columns", "check_names"]

"""The table catalog (tables with never-reused ids, views) and the DDL that changes it.

``TableCatalog`` owns the catalog document and the set of live table ids; its ``changing()``
lock serializes catalog changes and is the first lock in the storage's order (server/storage/
README.md). Its in-memory catalog is replaced, never mutated, under the storage lock, so
readers holding that lock see one version. ``Ddl`` runs create/drop of tables and views
across the parts a table has: the catalog, its row index tables, its memtable entries and
its segment files. Every change is persisted atomically (catalog.json) before it is visible.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from partialflow.server.errors import AlreadyExists, InvalidArgument, NotFound
from partialflow.server.storage.catalog import Catalog, TableEntry
from partialflow.server.storage.files import FileSet
from partialflow.server.storage.indexer import RowIndexer
from partialflow.server.storage.memtable import Memtable
from partialflow.server.storage.schema import TableSchema, check_identifier, validate_schema


def table_dir(tables_dir: Path, name: str) -> Path:
    """A table's segment directory. Names are validated identifiers; the containment check
    is a second line of defence."""
    path = tables_dir / name.lower()
    if path.parent != tables_dir or not name.isidentifier():
        raise InvalidArgument(f"invalid table name {name!r}")
    return path


class TableCatalog:
    """The tables and views (guarded by the storage lock, shared; ``_locked`` methods are
    called with it held, the others take it)."""

    def __init__(self, lock: threading.Lock, catalog_path: Path, tables_dir: Path,
                 catalog: Catalog | None = None) -> None:
        self._lock = lock
        self._ddl_lock = threading.Lock()
        self.catalog_path = catalog_path
        self.tables_dir = tables_dir
        self._catalog = catalog if catalog is not None else Catalog()
        self._live: set[int] = set(self._catalog.by_id())

    def changing(self) -> threading.Lock:
        """The lock serializing catalog changes (first in the storage's lock order)."""
        return self._ddl_lock

    @property
    def current_locked(self) -> Catalog:
        """The current catalog (a value: replaced on change, never mutated)."""
        return self._catalog

    def publish_locked(self, catalog: Catalog, *, add: int | None = None) -> None:
        self._catalog = catalog
        if add is not None:
            self._live.add(add)

    def refuse_writes_locked(self, tid: int) -> None:
        """A table being dropped: writes to it are refused from now on."""
        self._live.discard(tid)

    def is_live(self, tid: int) -> bool:
        return tid in self._live

    def live_locked(self) -> set[int]:
        return self._live

    def check_live_locked(self, entries: Iterable[TableEntry]) -> None:
        for e in entries:
            if e.id not in self._live:
                raise NotFound(f"table '{e.schema.name}' was dropped")

    def entry_locked(self, name: str) -> TableEntry:
        entry = self._catalog.tables.get(str(name).lower()) if isinstance(name, str) else None
        if entry is None:
            known = ", ".join(sorted(e.schema.name for e in self._catalog.tables.values()))
            raise NotFound(f"unknown table '{name}'; tables are: {known or '(none)'}")
        return entry

    def entry(self, name: str) -> TableEntry:
        with self._lock:
            return self.entry_locked(name)

    def entries(self) -> list[TableEntry]:
        with self._lock:
            return list(self._catalog.tables.values())

    def by_id(self) -> dict[int, TableEntry]:
        with self._lock:
            return self._catalog.by_id()

    def names(self) -> set[str]:
        """Lower-cased names of the live tables."""
        with self._lock:
            return set(self._catalog.tables)

    def keyed_ids(self) -> set[int]:
        """Ids of the tables with a primary key."""
        with self._lock:
            return {e.id for e in self._catalog.tables.values() if e.schema.primary_key}

    def table_dir(self, name: str) -> Path:
        return table_dir(self.tables_dir, name)

    def refuse_taken_name_locked(self, name: str) -> None:
        low = name.lower()
        if low in self._catalog.tables:
            raise AlreadyExists(f"table '{self._catalog.tables[low].schema.name}' already exists")
        for n, _ in self._catalog.views:
            if n.lower() == low:
                raise AlreadyExists(f"a view named '{n}' already exists")


class Ddl:
    """CREATE/DROP of tables and views. ``check_space`` refuses a definition on a full disk
    as a write is refused (called under the storage lock); drops need no room, and free some."""

    def __init__(self, lock: threading.Lock, catalog: TableCatalog, index: RowIndexer,
                 memtable: Memtable, files: FileSet, check_space: Callable[[], None]) -> None:
        self._lock = lock
        self._catalog = catalog
        self._index = index
        self._memtable = memtable
        self._files = files
        self._check_space = check_space

    def create_table(self, schema: TableSchema) -> None:
        schema = validate_schema(schema)
        cats = self._catalog
        low = schema.name.lower()
        tdir = cats.table_dir(schema.name)
        with cats.changing():
            with self._lock:
                cats.refuse_taken_name_locked(schema.name)
                self._check_space()
                old = cats.current_locked
                cat = Catalog(old.next_id + 1, dict(old.tables), list(old.views))
                entry = TableEntry(old.next_id, schema)
                cat.tables[low] = entry
            self._index.create(entry.id, bool(schema.primary_key))
            tdir.mkdir(parents=True, exist_ok=True)
            cat.save(cats.catalog_path)
            with self._lock:
                cats.publish_locked(cat, add=entry.id)
                self._memtable.add_table(entry.id)

    def drop_table(self, name: str) -> None:
        cats, files = self._catalog, self._files
        with cats.changing(), files.changing():
            with self._lock:
                entry = cats.entry_locked(name)
                old = cats.current_locked
                cat = Catalog(old.next_id, dict(old.tables), list(old.views))
                del cat.tables[entry.schema.name.lower()]
                # Refuse further writes now; records already queued still commit (harmlessly).
                cats.refuse_writes_locked(entry.id)
            cat.save(cats.catalog_path)
            with self._lock:
                cats.publish_locked(cat)
                manifest = files.copy_locked()
                tm = manifest.tables.pop(entry.id, None)
            files.save(manifest)
            self._index.drop(entry.id)
            with self._lock:
                files.publish_locked(manifest)
                self._memtable.drop_table(entry.id)
                tdir = cats.table_dir(entry.schema.name)
                files.retire_locked(str(tdir / seg.file) for seg in (tm.segments if tm else ()))
                doomed = files.collect_locked()
            files.delete_files(doomed)

    def save_view(self, name: str, sql: str) -> None:
        check_identifier(name, "view")
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument(f"view '{name}' needs a SELECT statement")
        cats = self._catalog
        with cats.changing():
            with self._lock:
                cats.refuse_taken_name_locked(name)
                self._check_space()
                old = cats.current_locked
                cat = Catalog(old.next_id, dict(old.tables), old.views + [(name, sql)])
            cat.save(cats.catalog_path)
            with self._lock:
                cats.publish_locked(cat)

    def drop_view(self, name: str) -> None:
        cats = self._catalog
        with cats.changing():
            with self._lock:
                old = cats.current_locked
                views = [(n, s) for n, s in old.views if n.lower() != str(name).lower()]
                if len(views) == len(old.views):
                    known = ", ".join(n for n, _ in old.views) or "(none)"
                    raise NotFound(f"unknown view '{name}'; views are: {known}")
                cat = Catalog(old.next_id, dict(old.tables), views)
            cat.save(cats.catalog_path)
            with self._lock:
                cats.publish_locked(cat)

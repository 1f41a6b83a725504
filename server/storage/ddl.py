"""Catalog operations of Storage (tables and views), kept apart from the write/read paths.

``CatalogOps`` is a mixin: it relies on the Storage's locks and state (see ``store.py``).
Every change is persisted atomically (catalog.json) before it becomes visible.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, cast

from partialflow.server.errors import AlreadyExists, InvalidArgument, NotFound
from partialflow.server.storage import maintenance
from partialflow.server.storage.catalog import Catalog, Manifest, TableEntry
from partialflow.server.storage.schema import TableSchema, check_identifier, validate_schema

if TYPE_CHECKING:
    from partialflow.server.storage.rowindex import RowIndex
    from partialflow.server.storage.segments import MemEntry
    from partialflow.server.storage.space import DiskSpace
    from partialflow.server.storage.store import Storage


class CatalogOps:
    """Mixin of ``Storage``: uses its ``_ddl_lock``/``_manifest_lock``/``_lock``, ``_catalog``,
    ``_manifest``, ``_live``, ``_mem``, ``_index`` and file bookkeeping."""

    # The Storage state this mixin works on, declared for the type checker only (annotations
    # without values create no class attributes); ``Storage.__init__`` assigns them.
    tables_dir: Path
    catalog_path: Path
    manifest_path: Path
    _ddl_lock: threading.Lock
    _manifest_lock: threading.Lock
    _lock: threading.Lock
    _catalog: Catalog
    _manifest: Manifest
    _live: set[int]
    _index: RowIndex | None
    _mem: dict[int, list[MemEntry]]
    _mem_rows: int
    _mem_bytes: int
    _pending_bytes: int
    _space: DiskSpace | None
    _obsolete: set[str]

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...

        def _collect_unreferenced(self) -> list[str]: ...

    def create_table(self, schema: TableSchema) -> None:
        """Create a table; AlreadyExists for a taken name, InvalidArgument for a bad schema."""
        self._check_open()
        schema = validate_schema(schema)
        low = schema.name.lower()
        table_dir = self._table_dir(schema.name)
        with self._ddl_lock:
            with self._lock:
                self._refuse_taken_name(schema.name)
                self._check_space()
                cat = Catalog(
                    self._catalog.next_id + 1, dict(self._catalog.tables), list(self._catalog.views)
                )
                entry = TableEntry(self._catalog.next_id, schema)
                cat.tables[low] = entry
            assert self._index is not None
            self._index.create(entry.id, bool(schema.primary_key))
            table_dir.mkdir(parents=True, exist_ok=True)
            cat.save(self.catalog_path)
            with self._lock:
                self._catalog = cat
                self._live.add(entry.id)
                self._mem[entry.id] = []

    def drop_table(self, name: str) -> None:
        """Drop a table and (once no snapshot reads them) its files; NotFound if absent."""
        self._check_open()
        with self._ddl_lock, self._manifest_lock:
            with self._lock:
                entry = self._entry(name)
                cat = Catalog(
                    self._catalog.next_id, dict(self._catalog.tables), list(self._catalog.views)
                )
                del cat.tables[entry.schema.name.lower()]
                # Refuse further writes now; records already queued still commit (harmlessly).
                self._live.discard(entry.id)
            cat.save(self.catalog_path)
            with self._lock:
                self._catalog = cat
                manifest = self._manifest.copy()
                tm = manifest.tables.pop(entry.id, None)
            manifest.save(self.manifest_path)
            assert self._index is not None
            self._index.drop(entry.id)
            with self._lock:
                self._manifest = manifest
                dropped = self._mem.pop(entry.id, [])
                self._mem_rows -= sum(e.batch.num_rows for e in dropped)
                self._mem_bytes -= sum(e.batch.nbytes for e in dropped)
                table_dir = self._table_dir(entry.schema.name)
                for seg in tm.segments if tm else ():
                    self._obsolete.add(str(table_dir / seg.file))
                doomed = self._collect_unreferenced()
            maintenance.delete_files(cast("Storage", self), doomed)

    def table(self, name: str) -> TableSchema:
        """Schema of a table; NotFound naming it and listing the existing tables."""
        with self._lock:
            return self._entry(name).schema

    def table_ids(self) -> dict[str, int]:
        """Each live table's catalog id by lower-cased name: a table dropped and created
        again under its name gets a new id (checkpoints tell the two apart by it)."""
        with self._lock:
            return {name: e.id for name, e in self._catalog.tables.items()}

    def tables(self) -> list[TableSchema]:
        with self._lock:
            return [e.schema for e in sorted(self._catalog.tables.values(), key=lambda e: e.id)]

    def save_view(self, name: str, sql: str) -> None:
        """Persist a view definition (the dataflow layer re-creates views on restart)."""
        self._check_open()
        check_identifier(name, "view")
        if not isinstance(sql, str) or not sql.strip():
            raise InvalidArgument(f"view '{name}' needs a SELECT statement")
        with self._ddl_lock:
            with self._lock:
                self._refuse_taken_name(name)
                self._check_space()
                cat = Catalog(
                    self._catalog.next_id,
                    dict(self._catalog.tables),
                    self._catalog.views + [(name, sql)],
                )
            cat.save(self.catalog_path)
            with self._lock:
                self._catalog = cat

    def drop_view(self, name: str) -> None:
        self._check_open()
        with self._ddl_lock:
            with self._lock:
                views = [(n, s) for n, s in self._catalog.views if n.lower() != str(name).lower()]
                if len(views) == len(self._catalog.views):
                    known = ", ".join(n for n, _ in self._catalog.views) or "(none)"
                    raise NotFound(f"unknown view '{name}'; views are: {known}")
                cat = Catalog(self._catalog.next_id, dict(self._catalog.tables), views)
            cat.save(self.catalog_path)
            with self._lock:
                self._catalog = cat

    def views(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._catalog.views)

    def _check_space(self) -> None:
        """Refuse a definition on a full disk as a write is refused (call under the lock);
        drops need no room, and free some."""
        if self._space is not None:
            self._space.check(self._space.free_bytes(), 0, self._pending_bytes, self._mem_bytes)

    def _refuse_taken_name(self, name: str) -> None:
        low = name.lower()
        if low in self._catalog.tables:
            raise AlreadyExists(f"table '{self._catalog.tables[low].schema.name}' already exists")
        for n, _ in self._catalog.views:
            if n.lower() == low:
                raise AlreadyExists(f"a view named '{n}' already exists")

    def _entry(self, name: str) -> TableEntry:
        entry = self._catalog.tables.get(str(name).lower()) if isinstance(name, str) else None
        if entry is None:
            known = ", ".join(sorted(e.schema.name for e in self._catalog.tables.values()))
            raise NotFound(f"unknown table '{name}'; tables are: {known or '(none)'}")
        return entry

    def _table_dir(self, name: str) -> Path:
        # Names are validated identifiers; the containment check is a second line of defence.
        path = self.tables_dir / name.lower()
        if path.parent != self.tables_dir or not name.isidentifier():
            raise InvalidArgument(f"invalid table name {name!r}")
        return path


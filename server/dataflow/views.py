"""The view catalog: the DDL of views and what the dataflow knows about each.

It plans a view (planner), installs its nodes in the graph and loads its full state
(through the executor, in order with writes), persists it in storage's catalog, and drops
it again; recovery adopts a persisted view with its states from a checkpoint. It owns
which views each view is defined over and the types of each view's parameters, under one
DDL lock. Reads, subscriptions and stats stay with the facade (``facade.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from partialflow.operators.base import Row
from partialflow.server.dataflow.executor import Executor
from partialflow.server.dataflow.fill import Waiter
from partialflow.server.dataflow.graph import Graph
from partialflow.server.dataflow.materialize import states_of
from partialflow.server.dataflow.reads import Param, parameters
from partialflow.server.dataflow.state import State
from partialflow.server.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from partialflow.server.sql.planner import Planner, ViewPlan

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ViewCatalog:
    """``storage``: the base tables and the persisted views; ``memory_limit``: the current
    limit (it changes at run time), which a view's full state must fit in."""

    def __init__(
        self,
        storage: Any,
        graph: Graph,
        executor: Executor,
        *,
        upquery_timeout: float,
        memory_limit: Callable[[], int | None],
    ) -> None:
        self.storage = storage
        self.graph = graph
        self.executor = executor
        self.upquery_timeout = upquery_timeout
        self._memory_limit = memory_limit
        self.deps: dict[str, set[str]] = {}  # view -> views it is defined over
        self._params: dict[str, list[Param | None]] = {}  # view -> its parameters' types
        self._ddl = threading.Lock()

    def adopt_view(self, name: str, sql: str,
                   contents_for: Callable[[State], dict[Row, Any] | None]
                   ) -> list[tuple[State, list[Row]]] | None:
        """Recovery: install a persisted view whose states take their keys from a
        checkpoint (``contents_for``: a state's checkpointed keys, None if it has none).
        Returns (state, fill keys restored) for each state restored, or None, changing
        nothing, when a full state of the view is not in the checkpoint."""
        plan, params, used = self._plan(sql)
        ex = self.executor

        def go() -> list[tuple[State, list[Row]]] | None:
            known = set(ex.evictor.states)
            reader, new_full = self.graph.add_view(name, sql, plan)
            # In sid order: the LRU order of restored keys must not depend on addresses.
            new = sorted((st for st in reader.states() if st.sid not in known),
                         key=lambda st: st.sid)
            got = {st.sid: contents_for(st) for st in new}
            if any(() not in (got[st.sid] or {}) for st in new_full):
                self.graph.remove_view(name)
                return None
            ex.register_states(new)
            # Key bounds, loaded when a miss first needs one (not a Spark job per restart).
            ex.bounds.watch(new, self.column_info, now=False)
            out = []
            for st in new:
                contents = got[st.sid]
                if contents is None:
                    continue
                for fk, bucket in contents.items():
                    # (A key the checkpoint has shelved in the disk tier is shelved
                    # again, or left a hole if the tier no longer holds it.)
                    if st.restore(fk, bucket) and st.in_memory(fk):
                        ex.changed(st, fk)
                out.append((st, list(contents)))
            return out

        restored = ex.call(go).result()
        if restored is not None:
            self._params[name] = params
            self.deps[name] = used
        return restored

    def create_view(self, name: str, sql: str) -> None:
        if not _IDENT.match(name or ""):
            raise InvalidArgument(
                f"view name {name!r} is not a plain identifier (letters, digits, _; at most 64)"
            )
        with self._ddl:
            self._create(name.lower(), sql, persist=True)

    def recreate_view(self, name: str, sql: str) -> None:
        """At start: install a persisted view again, with empty state (not persisted again)."""
        self._create(name, sql, persist=False)

    def _create(self, name: str, sql: str, persist: bool) -> None:
        if name in self.graph.readers:
            raise AlreadyExists(f"view {name!r} already exists")
        if self._table_columns(name) is not None:
            raise AlreadyExists(f"{name!r} is already a table")
        plan, params, used = self._plan(sql)
        ex = self.executor
        waiter = ex.call(lambda: self._install(name, sql, plan)).result()
        self._params[name] = params
        if waiter is not None:
            if not ex.wait_event(waiter.event, self.upquery_timeout * 10):
                waiter.error = DeadlineExceeded(
                    f"loading the full state of view {name!r} timed out"
                )
            if waiter.error is not None:
                self._remove(name)
                raise waiter.error
        full = ex.evictor.full_bytes
        limit = self._memory_limit()
        if limit is not None and full > limit:
            crosses = ex.call(lambda: self.graph.cross_products(name)).result()
            self._remove(name)
            sizes = f" (its cross products: {'; '.join(crosses)})" if crosses else ""
            raise ResourceExhausted(
                f"view {name!r} needs {full} bytes of full state, more than the memory limit of "
                f"{limit} bytes{sizes}"
            )
        self.deps[name] = used
        if persist:
            self.storage.save_view(name, sql)

    def _plan(self, sql: str) -> tuple[ViewPlan, list[Param | None], set[str]]:
        """A view's plan, its parameters' types and the views it is defined over."""
        used: set[str] = set()
        plan = Planner(self._table_columns, lambda v: self._view_plan(v, used)).plan(sql)
        return plan, parameters(plan, self.column_info), used

    def explain_create(self, name: str, sql: str) -> str:
        """A dry run of CREATE VIEW: is it supported, and how would it be maintained?

        Plans the view and decides its materialization in a scratch graph (so nothing is
        created and nothing is shared with existing views), and returns the operator
        tree with each state partial or full, its key, and why."""
        if not _IDENT.match(name or ""):
            raise InvalidArgument(
                f"view name {name!r} is not a plain identifier (letters, digits, _; at most 64)"
            )
        used: set[str] = set()
        plan = Planner(self._table_columns, lambda v: self._view_plan(v, used)).plan(sql)
        scratch = Graph()
        scratch.add_view(name.lower(), sql, plan)
        return scratch.explain(name.lower(), live=False)

    def _install(self, name: str, sql: str, plan: ViewPlan) -> Waiter | None:
        """On the executor thread: add the view's nodes, start loading its full state."""
        reader, new_full = self.graph.add_view(name, sql, plan)
        states = [st for n in reader.nodes for st in states_of(n)]
        self.executor.register_states(states)
        # Key bounds (bounds.py) from here: every later write passes the executor.
        self.executor.bounds.watch(states, self.column_info)
        return self.executor.fills.load_full(new_full) if new_full else None

    def _remove(self, name: str) -> None:
        ex = self.executor
        ex.call(lambda: _forget(ex, self.graph.remove_view(name))).result()
        self.deps.pop(name, None)
        self._params.pop(name, None)

    def drop_view(self, name: str) -> None:
        name = name.lower()
        with self._ddl:
            if name not in self.graph.readers:
                raise NotFound(f"unknown view {name!r}")
            users = sorted(v for v, d in self.deps.items() if name in d)
            if users:
                raise FailedPrecondition(
                    f"view {name!r} is used by view(s) {', '.join(users)}; drop those first"
                )
            self._remove(name)
            self.storage.drop_view(name)

    def check_drop_table(self, table: str) -> None:
        users = self.graph.users_of_table(table.lower())
        if users:
            raise FailedPrecondition(
                f"table {table!r} is used by view(s) {', '.join(users)}; drop those first"
            )

    def param_types(self, view: str) -> list[Param | None] | None:
        """Per ``?`` parameter of ``view`` (its reader's name), the base column it compares
        (None: computed); None for a view being created or dropped."""
        return self._params.get(view)

    def _table_columns(self, name: str) -> tuple[str, ...] | None:
        try:
            return self.storage.table(name).column_names
        except NotFound:
            return None

    def column_info(self, table: str, col: int) -> tuple[str, str] | None:
        try:
            c = self.storage.table(table).columns[col]
        except (NotFound, IndexError):
            return None
        return c.name, c.type

    def _view_plan(self, name: str, used: set[str]) -> ViewPlan | None:
        reader = self.graph.readers.get(name)
        if reader is None:
            return None
        used.add(name)
        return reader.plan


def _forget(ex: Executor, states: list[State]) -> None:
    """Unregister a dropped view's states and free their contents right away (as
    ``Dataflow.close`` does: by reference counting, not the cycle collector)."""
    ex.forget_states(states)
    for st in states:
        st.release()

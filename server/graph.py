"""The dataflow graph: nodes, their states, and where state is partial or full.

``Graph.add_view`` turns a planned operator tree into nodes, walking top-down from the
reader with the reader's key. At each stateful node it decides the materialization:

* **partial** on the key's trace when the reader's key columns are copied unchanged down
  to that node (``Operator.resolve``): a fill of key k above fills k here too, from the
  same snapshot, and evicting k here evicts k above (the trace links);
* **miss** for a join index whose key the downstream key does not trace to, but where
  every downstream key is computable from the other side's rows: a lookup that finds a
  hole drops the update and evicts exactly those downstream keys;
* **full** otherwise — and then everything below is full too, so partial state never
  sits below full state.

Identical subtrees with identical materialization are shared between views.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Hashable

from partialflow.operators.base import GroupedOperator, Operator
from partialflow.operators.filter import Filter
from partialflow.operators.join import Join
from partialflow.operators.project import Project
from partialflow.server.planner import PlanNode, ViewPlan
from partialflow.server.state import State

Req = "tuple[int, ...] | None"


@dataclass(eq=False)
class Node:
    nid: int
    columns: tuple[str, ...]
    op: Operator | None  # None for base tables and readers
    parents: list[Node]
    table: str | None = None
    view: str | None = None  # set on readers
    children: list[tuple[Node, int]] = field(default_factory=list)
    own: State | None = None  # grouped operator's state, or the reader's rows
    sides: dict[int, State] = field(default_factory=dict)  # join indexes, by parent
    users: set[str] = field(default_factory=set)  # views using this node
    signature: Hashable = None

    @property
    def kind(self) -> str:
        if self.table is not None:
            return "base"
        if self.view is not None:
            return "reader"
        return self.op.kind if self.op is not None else "?"

    def label(self) -> str:
        if self.table is not None:
            return f"table {self.table}"
        if self.view is not None:
            return f"reader {self.view}"
        return self.op.description()


@dataclass
class Reader:
    """A view's entry point: its reader node and how rows are presented."""

    name: str
    sql: str
    plan: ViewPlan
    node: Node
    nodes: list[Node]  # every node the view uses (for stats and dropping)

    @property
    def state(self) -> State:
        assert self.node.own is not None
        return self.node.own


class Graph:
    """All nodes of all views. Mutated only by the executor."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._sids = itertools.count(1)
        self.nodes: dict[int, Node] = {}
        self.by_signature: dict[Hashable, Node] = {}
        self.bases: dict[str, Node] = {}
        self.readers: dict[str, Reader] = {}

    # -- building ----------------------------------------------------------------------
    def add_view(self, name: str, sql: str, plan: ViewPlan) -> tuple[Reader, list[State]]:
        """Create the view's nodes; returns the reader and the new full states to load."""
        new_full: list[State] = []
        used: list[Node] = []
        parent = self._build(plan.root, plan.key, None, new_full, used, name)
        node = self._new_node(parent.columns, None, [parent], view=name)
        node.signature = ("reader", name)
        node.own = self._state(node, "rows", plan.key, plan.key, "partial", f"reader {name}")
        node.own.reason = "keyed by the view's parameters; filled per key on read" if plan.key else "no parameters: one key, filled on the first read"
        self._link(node.own, parent, plan.key)
        used.append(node)
        for n in used:
            n.users.add(name)
        reader = Reader(name, sql, plan, node, used)
        self.readers[name] = reader
        return reader, new_full

    def _build(self, pn: PlanNode, req, owner: State | None, new_full: list[State], used: list[Node], view: str) -> Node:
        if pn.op is None:
            node = self.bases.get(pn.table)
            if node is None:
                node = self._new_node(pn.columns, None, [], table=pn.table)
                node.signature = ("base", pn.table)
                self.bases[pn.table] = node
            used.append(node)
            return node
        op = pn.op
        if isinstance(op, GroupedOperator):
            return self._build_grouped(pn, req, new_full, used, view)
        if isinstance(op, Join):
            return self._build_join(pn, req, new_full, used, view)
        parents = [self._build(p, _trace(op, req, i), None, new_full, used, view) for i, p in enumerate(pn.parents)]
        return self._shared(op, parents, (), used)

    def _build_grouped(self, pn: PlanNode, req, new_full, used, view) -> Node:
        op = pn.op
        groups = op.group_columns()
        partial = req is not None and set(req) <= set(groups)
        if not partial:
            op = _unbounded(op)
        key = tuple(req) if partial else ()
        parent_req = _trace(op, key, 0) if partial else None
        parent = self._build(pn.parents[0], parent_req, None, new_full, used, view)
        spec = ("grouped", key, partial)
        sig = (op.signature(), parent.nid, spec)
        node = self.by_signature.get(sig)
        if node is None:
            node = self._new_node(op.columns, op, [parent])
            node.signature = sig
            self.by_signature[sig] = node
            mode = "partial" if partial else "full"
            node.own = self._state(node, "grouped", groups, key, mode, f"{op.symbol} n{node.nid}")
            if partial:
                node.own.reason = "the key above is copied from grouping columns here, so it is filled per key with it"
            elif req is None:
                node.own.reason = "a state above is full, so everything below it is full"
            else:
                node.own.reason = "key column computed by an aggregate (not a grouping column), so no key can be pushed below it"
            if partial:
                self._link(node.own, parent, parent_req)
            else:
                new_full.append(node.own)
        used.append(node)
        return node

    def _build_join(self, pn: PlanNode, req, new_full, used, view) -> Node:
        op: Join = pn.op
        idx = op.side_indexes()
        modes: dict[int, tuple[str, tuple[int, ...]]] = {}
        for s in (0, 1):
            mine, other = _trace(op, req, s), _trace(op, req, 1 - s)
            if mine is not None and set(mine) <= set(idx[s]):
                modes[s] = ("partial", mine)
            elif other is not None and join_kind(op) == "inner" and req:
                modes[s] = ("miss", idx[s])
            else:
                modes[s] = ("full", ())
        parents = []
        for s, p in enumerate(pn.parents):
            mode, key = modes[s]
            # A miss-mode index caches a stream that must stay complete (the join's output
            # needs every row of it), so below such an index everything is full.
            parents.append(self._build(p, key if mode == "partial" else None, None, new_full, used, view))
        spec = tuple(modes[s] for s in (0, 1))
        sig = (op.signature(), tuple(p.nid for p in parents), spec)
        node = self.by_signature.get(sig)
        if node is None:
            node = self._new_node(op.columns, op, parents)
            node.signature = sig
            self.by_signature[sig] = node
            for s in (0, 1):
                mode, key = modes[s]
                st = self._state(node, "rows", idx[s], key, mode, f"{op.symbol} n{node.nid} index {s}")
                st.reason = _join_reason(mode, req)
                node.sides[s] = st
                if mode == "full":
                    new_full.append(st)
                elif mode == "partial":
                    self._link(st, parents[s], key)
        used.append(node)
        return node

    def _shared(self, op: Operator, parents: list[Node], spec, used) -> Node:
        sig = (op.signature(), tuple(p.nid for p in parents), spec)
        node = self.by_signature.get(sig)
        if node is None:
            node = self._new_node(op.columns, op, parents)
            node.signature = sig
            self.by_signature[sig] = node
        used.append(node)
        return node

    def _new_node(self, columns, op, parents, table=None, view=None) -> Node:
        node = Node(next(self._ids), tuple(columns), op, list(parents), table=table, view=view)
        for i, p in enumerate(parents):
            p.children.append((node, i))
        self.nodes[node.nid] = node
        return node

    def _state(self, node: Node, kind, index, partial, mode, label) -> State:
        return State(next(self._sids), node, kind, tuple(index), tuple(partial), mode, label=label)

    def _link(self, st: State, parent: Node, req) -> None:
        """Trace links from ``st`` (keyed by ``req`` on ``parent``'s rows) to the nearest
        partial states below with the same fill key, and the derivation source."""
        if req is None:
            return
        below = _states_below(parent, tuple(req))
        for b in below:
            st.below.append(b)
            b.dependents.append(st)
        # Derive st from a grouped state through filter/project only (no Spark, no
        # float drift between the two copies).
        chain: list[Node] = []
        n = parent
        while n.op is not None and isinstance(n.op, (Filter, Project)) and n.view is None:
            chain.append(n)
            n = n.parents[0]
        if n.own is not None and n.own.kind == "grouped" and n.own in below and st.kind in ("rows", "grouped"):
            st.source = (n.own, list(reversed(chain)))

    # -- dropping ----------------------------------------------------------------------
    def remove_view(self, name: str) -> list[State]:
        """Unlink the view's nodes no other view uses; returns their states."""
        reader = self.readers.pop(name)
        gone: list[State] = []
        for n in sorted(set(reader.nodes), key=lambda n: -n.nid):
            n.users.discard(name)
            if n.users:
                continue
            if n.table is not None:
                self.bases.pop(n.table, None)
            for p in n.parents:
                p.children = [(c, i) for c, i in p.children if c is not n]
            self.nodes.pop(n.nid, None)
            self.by_signature.pop(n.signature, None)
            for st in _states_of(n):
                for b in st.below:
                    b.dependents = [d for d in b.dependents if d is not st]
                gone.append(st)
        return gone

    def users_of_table(self, table: str) -> list[str]:
        node = self.bases.get(table)
        return sorted(node.users) if node else []

    # -- display -----------------------------------------------------------------------
    def explain(self, name: str, live: bool = True) -> str:
        """The view's operator tree; ``live`` adds each state's filled keys and bytes."""
        reader = self.readers[name]
        lines: list[str] = []

        def walk(n: Node, depth: int) -> None:
            pad = "  " * depth
            lines.append(f"{pad}{n.label()}  [n{n.nid}]")
            for st in _states_of(n):
                lines.append(f"{pad}  └ {st.describe(live)}")
                if st.reason:
                    lines.append(f"{pad}    why: {st.reason}")
            for p in n.parents:
                walk(p, depth + 1)

        walk(reader.node, 0)
        return "\n".join(lines)

    def dot(self, name: str) -> str:
        reader = self.readers[name]
        out = [f'digraph "{name}" {{', "  rankdir=BT;", '  node [shape=box, fontname="monospace"];']
        seen: set[int] = set()

        def walk(n: Node) -> None:
            if n.nid in seen:
                return
            seen.add(n.nid)
            states = "\\n".join(st.describe() for st in _states_of(n))
            label = n.label().replace('"', '\\"') + (f"\\n{states}" if states else "")
            shape = "cylinder" if n.table else ("note" if n.view else "box")
            out.append(f'  n{n.nid} [label="{label}", shape={shape}];')
            for i, p in enumerate(n.parents):
                out.append(f"  n{p.nid} -> n{n.nid};")
                walk(p)

        walk(reader.node)
        out.append("}")
        return "\n".join(out)


# -- tracing keys through operators ----------------------------------------------------------
def _trace(op: Operator, req, parent: int):
    """Map key columns of ``op``'s output to columns of parent ``parent``, or None if any
    key column is computed (or comes from another parent)."""
    if req is None:
        return None
    out = []
    for c in req:
        src = [pc for p, pc in op.resolve(c) if p == parent]
        if not src:
            return None
        out.append(src[0])
    return tuple(out)


def _join_reason(mode: str, req) -> str:
    if mode == "partial":
        return "the key above is the join key, so this index is filled per key with it"
    if mode == "miss":
        return "updates from the other side carry the key above, so a miss here evicts exactly the keys they affect"
    if req is None:
        return "a state above is full, so everything below it is full"
    return "updates from the other side can't tell which keys above they affect, so their lookups must never miss"


def join_kind(op: Join) -> str:
    return getattr(op, "join_kind", None) or getattr(op, "kind_name", None) or getattr(op, "how", "inner")


def _unbounded(op: GroupedOperator) -> GroupedOperator:
    """A full state never becomes a hole, so MIN/MAX/top-k there keep every candidate."""
    if getattr(op, "candidates", None) is None:
        return op
    clone = copy.copy(op)
    clone.candidates = None
    return clone


def _states_of(n: Node) -> list[State]:
    return ([n.own] if n.own is not None else []) + [n.sides[s] for s in sorted(n.sides)]


def _states_below(node: Node, req: tuple[int, ...]) -> list[State]:
    """The nearest partial states at or below ``node`` whose fill key equals ``req``'s."""
    if node.own is not None and node.view is None:
        st = node.own
        return [st] if st.mode == "partial" else []
    if node.op is None:
        return []
    found: list[State] = []
    for i, p in enumerate(node.parents):
        side = node.sides.get(i)
        mapped = _trace(node.op, req, i)
        if side is not None:
            if side.mode == "partial" and mapped is not None:
                found.append(side)
            continue
        if mapped is not None:
            found.extend(_states_below(p, mapped))
    return found

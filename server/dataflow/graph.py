"""The dataflow graph: nodes, their states, and its explain output.

``Graph.add_view`` turns a planned operator tree into nodes, walking top-down from the
reader with the reader's key; at each stateful node ``materialize`` decides partial,
evict-on-miss or full (and says why). Identical subtrees with identical materialization
are shared between views. The graph is mutated only on the executor thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field

from partialflow.operators.base import GroupedOperator, Operator
from partialflow.operators.join import Join
from partialflow.server.dataflow import materialize as mz
from partialflow.server.dataflow.materialize import Req, states_of
from partialflow.server.dataflow.state import Mode, State
from partialflow.server.sql.planner import PlanNode, ViewPlan


@dataclass(eq=False)
class Node:
    nid: int  # ids are topological: a node's id is greater than its parents'
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
        assert self.op is not None
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

    def states(self) -> list[State]:
        """Every state the view uses (shared ones too), each once."""
        return list({st.sid: st for n in set(self.nodes) for st in states_of(n)}.values())


class Graph:
    """All nodes of all views."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._sids = itertools.count(1)
        self.nodes: dict[int, Node] = {}
        self.by_signature: dict[Hashable, Node] = {}
        self.bases: dict[str, Node] = {}
        self.readers: dict[str, Reader] = {}
        # Each node's states and those of every node above it (``states_above``), derived
        # from the links and dropped whenever a view comes or goes.
        self._above: dict[int, list[State]] = {}

    # -- building ----------------------------------------------------------------------
    def add_view(self, name: str, sql: str, plan: ViewPlan) -> tuple[Reader, list[State]]:
        """Create the view's nodes; returns the reader and the new full states to load."""
        self._above.clear()
        new_full: list[State] = []
        used: list[Node] = []
        parent = self._build(plan.root, plan.key, new_full, used)
        node = self._new_node(parent.columns, None, [parent], view=name)
        node.signature = ("reader", name)
        decision = mz.reader_decision(plan.key)
        node.own = self._state(node, "rows", plan.key, decision, f"reader {name}")
        mz.link(node.own, parent, plan.key)
        used.append(node)
        for n in used:
            n.users.add(name)
        reader = Reader(name, sql, plan, node, used)
        self.readers[name] = reader
        return reader, new_full

    def _build(self, pn: PlanNode, req: Req, new_full: list[State], used: list[Node]) -> Node:
        if pn.op is None:
            assert pn.table is not None
            node = self.bases.get(pn.table)
            if node is None:
                node = self._new_node(pn.columns, None, [], table=pn.table)
                node.signature = ("base", pn.table)
                self.bases[pn.table] = node
            used.append(node)
            return node
        op = pn.op
        if isinstance(op, GroupedOperator):
            return self._build_grouped(pn, op, req, new_full, used)
        if isinstance(op, Join):
            return self._build_join(pn, op, req, new_full, used)
        parents = [
            self._build(p, mz.trace(op, req, i), new_full, used) for i, p in enumerate(pn.parents)
        ]
        return self._shared(op, parents, (), used)[0]

    def _build_grouped(
        self, pn: PlanNode, op: GroupedOperator, req: Req, new_full: list[State], used: list[Node]
    ) -> Node:
        decision = mz.grouped_decision(op, req)
        partial = decision.mode == "partial"
        if not partial:
            op = mz.unbounded(op)
        parent_req = mz.trace(op, decision.key, 0) if partial else None
        parent = self._build(pn.parents[0], parent_req, new_full, used)
        node, new = self._shared(op, [parent], ("grouped", decision.key, partial), used)
        if new:
            node.own = self._state(
                node, "grouped", op.group_columns(), decision, f"{op.symbol} n{node.nid}"
            )
            if partial:
                mz.link(node.own, parent, parent_req)
            else:
                new_full.append(node.own)
        return node

    def _build_join(
        self, pn: PlanNode, op: Join, req: Req, new_full: list[State], used: list[Node]
    ) -> Node:
        decisions = mz.join_decisions(op, req)
        parents = []
        for s, p in enumerate(pn.parents):
            d = decisions[s]
            # A miss-mode index caches a stream that must stay complete (the join's output
            # needs every row of it), so below such an index everything is full.
            parents.append(self._build(p, d.key if d.mode == "partial" else None, new_full, used))
        spec = tuple((decisions[s].mode, decisions[s].key) for s in (0, 1))
        node, new = self._shared(op, parents, spec, used)
        if new:
            idx = op.side_indexes()
            for s in (0, 1):
                d = decisions[s]
                st = self._state(node, "rows", idx[s], d, f"{op.symbol} n{node.nid} index {s}")
                node.sides[s] = st
                if d.mode == "full":
                    new_full.append(st)
                elif d.mode == "partial":
                    mz.link(st, parents[s], d.key)
        return node

    def _shared(
        self, op: Operator, parents: list[Node], spec: Hashable, used: list[Node]
    ) -> tuple[Node, bool]:
        """The node computing ``op`` over ``parents`` with materialization ``spec``: the
        existing one (identical subgraphs are shared between views) or a new one; True
        when new, so the caller gives it its states."""
        sig = (op.signature(), tuple(p.nid for p in parents), spec)
        node = self.by_signature.get(sig)
        new = node is None
        if node is None:
            node = self._new_node(op.columns, op, parents)
            node.signature = sig
            self.by_signature[sig] = node
        used.append(node)
        return node, new

    def _new_node(self, columns: tuple[str, ...], op: Operator | None, parents: list[Node],
                  table: str | None = None, view: str | None = None) -> Node:
        node = Node(next(self._ids), tuple(columns), op, list(parents), table=table, view=view)
        for i, p in enumerate(parents):
            p.children.append((node, i))
        self.nodes[node.nid] = node
        return node

    def _state(
        self, node: Node, kind: str, index: tuple[int, ...], d: mz.Decision, label: str
    ) -> State:
        mode: Mode = d.mode
        st = State(next(self._sids), node, kind, tuple(index), tuple(d.key), mode, label=label)  # type: ignore[arg-type]
        st.reason = d.reason
        return st

    # -- dropping ----------------------------------------------------------------------
    def remove_view(self, name: str) -> list[State]:
        """Unlink the view's nodes no other view uses; returns their states."""
        reader = self.readers.pop(name)
        self._above.clear()
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
            for st in states_of(n):
                for b in st.below:
                    b.dependents = [d for d in b.dependents if d is not st]
                gone.append(st)
        return gone

    def states_above(self, node: Node) -> list[State]:
        """The states of ``node`` and of every node its deltas can reach, each once."""
        found = self._above.get(node.nid)
        if found is None:
            seen: dict[int, State] = {st.sid: st for st in states_of(node)}
            for child, _ in node.children:
                for st in self.states_above(child):
                    seen.setdefault(st.sid, st)
            found = self._above[node.nid] = list(seen.values())
        return found

    def clustering(self) -> dict[str, list[str]]:
        """Per base table, the columns partial states' fill keys trace down to, most used
        first: what a miss filters on, so what compaction should sort segments by.

        Every partial (filled per key) and evict-on-miss (filled per join key) state
        counts: its fill key is traced through the operators below it, as the upquery
        layer traces keys to push filters (``upquery.state_plans._base_filters``). Only the
        first column of each traced key counts: a sort helps pruning on its leading column."""
        uses: dict[str, dict[str, int]] = {}
        seen: set[int] = set()
        for node in self.nodes.values():
            for st in states_of(node):
                if st.mode == "full" or not st.partial_cols or st.sid in seen:
                    continue
                seen.add(st.sid)
                if st.kind == "grouped":
                    assert node.op is not None
                    below = mz.trace(node.op, st.partial_cols, 0)
                    parent = node.parents[0]
                else:
                    side = 0 if node.view is not None else next(
                        s for s, x in node.sides.items() if x is st)
                    below, parent = tuple(st.partial_cols), node.parents[side]
                for table, col in _base_columns(parent, below):
                    per = uses.setdefault(table, {})
                    per[col] = per.get(col, 0) + 1
        # Most used first; ties by name so the choice does not depend on view order.
        return {t: sorted(c, key=lambda k: (-c[k], k)) for t, c in sorted(uses.items())}

    def users_of_table(self, table: str) -> list[str]:
        node = self.bases.get(table)
        return sorted(node.users) if node else []

    # -- display -----------------------------------------------------------------------
    def explain(self, name: str, live: bool = True) -> str:
        """The view's operator tree; ``live`` adds each state's filled keys and bytes."""
        reader = self.readers[name]
        lines: list[str] = []
        clustered = self.clustering()

        def walk(n: Node, depth: int) -> None:
            pad = "  " * depth
            line = f"{pad}{n.label()}  [n{n.nid}]"
            if n.table is not None and clustered.get(n.table):
                line += f"  clustered by ({', '.join(clustered[n.table])})"
            lines.append(line)
            if live and isinstance(n.op, Join) and n.op.cross:
                lines.append(f"{pad}  cross product now: {cross_sizes(n)}")
            for st in states_of(n):
                lines.append(f"{pad}  └ {describe_state(st, live)}")
                if st.reason:
                    lines.append(f"{pad}    why: {st.reason}")
            for p in n.parents:
                walk(p, depth + 1)

        walk(reader.node, 0)
        return "\n".join(lines)

    def cross_products(self, name: str) -> list[str]:
        """The sizes of each cross product of view ``name`` (for a refusal's message)."""
        reader = self.readers[name]
        return [f"{n.op.description()} [n{n.nid}]: {cross_sizes(n)}" for n in reader.nodes
                if isinstance(n.op, Join) and n.op.cross]

    def dot(self, name: str) -> str:
        reader = self.readers[name]
        out = [f'digraph "{name}" {{', "  rankdir=BT;", '  node [shape=box, fontname="monospace"];']
        seen: set[int] = set()

        def walk(n: Node) -> None:
            if n.nid in seen:
                return
            seen.add(n.nid)
            states = "\\n".join(describe_state(st) for st in states_of(n))
            label = n.label().replace('"', '\\"') + (f"\\n{states}" if states else "")
            shape = "cylinder" if n.table else ("note" if n.view else "box")
            out.append(f'  n{n.nid} [label="{label}", shape={shape}];')
            for p in n.parents:
                out.append(f"  n{p.nid} -> n{n.nid};")
                walk(p)

        walk(reader.node)
        out.append("}")
        return "\n".join(out)


def _base_columns(node: Node, cols: mz.Req) -> list[tuple[str, str]]:
    """(table, column) pairs the leading key column ``cols[0]`` of ``node``'s output traces
    to, through every parent it is copied from (both sides of a join key, say)."""
    if not cols:
        return []
    if node.table is not None:
        return [(node.table, node.columns[cols[0]])]
    if node.op is None:
        return []
    out: list[tuple[str, str]] = []
    for p, parent in enumerate(node.parents):
        mapped = mz.trace(node.op, cols[:1], p)
        if mapped is not None:
            out.extend(_base_columns(parent, mapped))
    return out


def cross_sizes(node: Node) -> str:
    """A cross product's sides and output, in rows and bytes, as its full indexes hold them."""
    sizes = []
    for s in (0, 1):
        st = node.sides.get(s)
        rows = sum(st.meter.item_counts().values()) if st is not None else 0
        sizes.append((rows, st.memory_bytes if st is not None else 0))
    (lr, lb), (rr, rb) = sizes
    return (f"left {lr} rows ({lb} B) x right {rr} rows ({rb} B) = {lr * rr} rows out")


def describe_state(st: State, live: bool = True) -> str:
    """A state as explain shows it: its kind, mode and index, and (``live``) how much it
    holds now."""
    key = ",".join(map(str, st.partial_cols))
    idx = ",".join(map(str, st.index_cols))
    mode = {
        "partial": f"partial on [{key}]",
        "miss": f"partial (evict-on-miss) on [{key}]",
        "full": "full",
    }[st.mode]
    head = f"{st.kind} state {mode}, index [{idx}]"
    if not live:
        return head
    disk = f" ({st.keys_shelved} on disk)" if st.keys_shelved else ""
    return f"{head}, {st.keys_filled} keys filled{disk}, {st.memory_bytes} B"

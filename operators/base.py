"""The one interface every operator implements.

Operators compute and nothing else: given a batch of input deltas from one parent and a
read-only view of the state they need, they return output deltas, misses and writes to
their own state. They never call Spark, caches or gRPC and never issue upqueries — a
lookup that finds a hole comes back as a ``Miss`` in the output, and the executor (which
owns ordering) decides what to do about it. That separation is what makes the ordering
argument checkable.

Rows are plain tuples in the operator's column order. A delta is ``(row, sign)`` with
sign +1 (insert) or -1 (delete); bags are represented by repeating a delta.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

Row = tuple[Any, ...]
Delta = tuple[Row, int]


@dataclass(slots=True)
class Miss:
    """A lookup into a parent's index (``side``) found a hole at ``key``.

    ``delta`` is the input that could therefore not be processed; it was dropped, and the
    executor evicts every downstream key that delta could have affected.
    """

    side: int
    key: Row
    delta: Delta


@dataclass(slots=True)
class Output:
    """What one ``on_input`` call produced."""

    deltas: list[Delta] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)
    # Grouped operators only: new entry per group key of their own state (None = the
    # group is gone). The executor applies these after the call.
    writes: dict[Row, Any] = field(default_factory=dict)
    # Grouped operators only: groups whose bounded candidates (MIN/MAX, top-k) ran out
    # under deletions. Their output can't be computed; the executor turns the group's
    # fill key into a hole (and evicts what was derived from it) so the next read
    # recomputes it by upquery. Deltas for these groups are not in ``deltas``.
    exhausted: list[Row] = field(default_factory=list)


class StateView(Protocol):
    """Read-only access to the state an operator needs, supplied by the executor."""

    def lookup(self, side: int, key: Row) -> list[Row] | None:
        """Rows of parent ``side`` whose index columns equal ``key`` (a bag: duplicates
        repeated), or None when that key is a hole in a partial index. Reflects the state
        before the current batch."""
        ...

    def own(self, group: Row) -> Any | None:
        """Grouped operators: the current entry of ``group`` in their own state, or None
        when the group does not exist (its fill key is known to be filled: the executor
        only passes deltas whose group is filled). Reflects the state before this batch."""
        ...


class Operator(ABC):
    """Base of all operators. Subclasses are immutable after construction."""

    symbol: ClassVar[str] = "?"
    kind: ClassVar[str] = "operator"

    def __init__(self, columns: tuple[str, ...], n_parents: int) -> None:
        self.columns = tuple(columns)
        self.n_parents = n_parents

    # -- wiring and provenance -------------------------------------------------------
    @abstractmethod
    def resolve(self, col: int) -> list[tuple[int, int]]:
        """Provenance of output column ``col``: the (parent index, parent column) pairs
        it is copied from unchanged; [] when it is computed. Routes upqueries and
        evictions: a key on ``col`` is a key on each returned parent column."""

    def side_indexes(self) -> dict[int, tuple[int, ...]]:
        """Indexes this operator looks up into: parent index -> key columns of that
        parent's rows (Noria's ``suggest_indexes``). Joins only."""
        return {}

    def group_columns(self) -> tuple[int, ...] | None:
        """Grouped operators: the output columns that form the key of their own state.
        None for operators without own state."""
        return None

    # -- computation -----------------------------------------------------------------
    @abstractmethod
    def on_input(self, parent: int, deltas: list[Delta], state: StateView) -> Output:
        """Process a batch of deltas arriving from parent ``parent``."""

    # -- identity and display --------------------------------------------------------
    @abstractmethod
    def signature(self) -> Hashable:
        """Equal signatures (with equal parents) compute the same thing: the graph shares
        such nodes between views."""

    @abstractmethod
    def description(self) -> str:
        """One line, starting with the operator's symbol, e.g. ``σ[length > 10]``."""

    def __repr__(self) -> str:
        return self.description()


class GroupedOperator(Operator):
    """Operators with their own keyed state (aggregate, top-k, distinct).

    Their state maps a group key (values of ``group_columns()`` in output order) to an
    entry. ``load_entries`` builds entries from the rows of the state DataFrame that the
    Spark compiler produces for an upquery; ``output_rows`` gives the output rows an entry
    currently stands for (used to derive the states above from a freshly filled one).
    """

    kind = "grouped"

    @abstractmethod
    def group_columns(self) -> tuple[int, ...]: ...

    @abstractmethod
    def input_group(self, parent: int, row: Row) -> Row:
        """The group key an input row belongs to (so the executor can gate it)."""

    def split(self, parent: int, deltas: list[Delta]) -> dict[Row, list[Delta]]:
        """The batch by group (``input_group``), groups in order of first appearance and
        each group's deltas in arrival order. The executor splits a batch once, gates it
        per group and hands the groups that pass to ``on_groups``: one key computation
        per delta and one fill check per group, instead of one of each per delta."""
        groups: dict[Row, list[Delta]] = {}
        for d in deltas:
            g = self.input_group(parent, d[0])
            bucket = groups.get(g)
            if bucket is None:
                groups[g] = [d]
            else:
                bucket.append(d)
        return groups

    def on_groups(self, parent: int, groups: dict[Row, list[Delta]], state: StateView) -> Output:
        """``on_input`` of a batch already split by ``split`` (some groups may have been
        left out). Each group is processed on its own, so this is ``on_input`` of the
        groups' deltas one group after another."""
        return self.on_input(parent, [d for batch in groups.values() for d in batch], state)

    @abstractmethod
    def load_entries(self, state_rows: list[Row]) -> dict[Row, Any]:
        """Entries from the Spark state rows (see ``server/upquery/operator_plans.py``)."""

    @abstractmethod
    def output_rows(self, group: Row, entry: Any) -> list[Row]:
        """The output rows an entry stands for (empty if the group has no rows)."""

    @abstractmethod
    def entry_size(self, entry: Any) -> int:
        """Approximate bytes held by an entry (for the memory limit)."""

"""What the dataflow needs from whatever answers upqueries (the ``UpqueryRunner``).

The executor decides what goes into a fill and applies the reply in order; a runner only
computes, for each of the fill's ``roots``, the rows of that state for the fill's keys as
of snapshot ``fill.lsn``. The production runner compiles the state's subgraph to one Spark
plan (``partialflow.server.upquery``); tests use a Python model of the base tables
(``tests/dataflow/fake_runner.py``) that can delay, reorder, fail or drop replies.

Reply rows per root state ``st`` (keyed by ``st.sid``), only for the keys
``fill.keys[st]`` (NULL key values never match):

* ``st.kind == "rows"``: the rows of the stream the state materializes — the output of
  its node's parent (a reader's parent; a join index's parent on that side);
* ``st.kind == "grouped"``: the operator's *state rows*, which ``op.load_entries``
  turns into entries (layouts in ``partialflow.server.upquery.operator_plans``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from partialflow.operators.base import Row

if TYPE_CHECKING:
    from partialflow.server.dataflow.fill import Fill

FillResults = dict[int, list[Row]]  # root state sid -> its rows
# Called exactly once per submitted fill, from any thread: (fill, results, None) or
# (fill, None, error). It only enqueues a packet for the executor.
Reply = Callable[["Fill", "FillResults | None", "BaseException | None"], None]
# Called once per bound load, from any thread: (lo, hi, values, None) or
# (None, None, None, error); ``values``: the column's distinct values (None: too many).
BoundReply = Callable[[Any, Any, "list[Any] | None", "BaseException | None"], None]


class UpqueryRunner(Protocol):
    """Answers fills. ``submit`` is called on the executor thread under its lock and must
    not block on the answer; it must pin snapshot ``fill.lsn`` before returning (the
    executor moves on, and compaction must not drop that LSN meanwhile)."""

    @property
    def jobs(self) -> int:
        """Jobs run so far (for stats); safe to read from any thread."""
        ...

    def start(self) -> None:
        """Get ready (e.g. warm up in the background); called once by Dataflow.start."""
        ...

    def stats(self) -> dict[str, Any]:
        """The runner's own figures, merged into the dataflow's stats (the Spark runner's
        ``upquery_scan`` and ``index_*``); empty when it measures nothing."""
        ...

    def submit(self, fill: Fill, reply: Reply) -> None:
        """Start answering ``fill``; call ``reply`` when done (or never: the fill's
        deadline then fails its reads)."""
        ...

    def load_bound(self, table: str, column: str, lsn: int, reply: BoundReply) -> None:
        """Start computing MIN and MAX of ``column`` over every stored change of ``table``
        up to snapshot ``lsn`` (deleted rows too; both None when there are none), and its
        distinct values when there are at most ``bounds.MAX_VALUES`` of them, for a key
        bound (``bounds.py``). Like ``submit``: pins ``lsn`` before returning, never blocks
        on the answer."""
        ...

    def cancel(self, fill: Fill) -> None:
        """Best effort: stop working on ``fill`` (its reply will be ignored anyway)."""
        ...

    def close(self) -> None: ...

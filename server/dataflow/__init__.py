"""The dataflow: views kept incrementally up to date, with partial state filled on demand.

Modules, one job each (docs/architecture.md lists the ordering rules they implement):

* ``facade``      — ``Dataflow``, what the engine calls (lookups, subscriptions, evict, stats);
* ``views``       — the view catalog: view DDL (plan, install, load, drop, recovery's adopt),
  what each view is defined over and its parameters' types;
* ``executor``    — the one ordered loop and propagation of deltas through operators;
* ``packets``     — what goes on the executor's queue;
* ``fill``        — one upquery in flight, the updates it holds, a waiting read;
* ``fills``       — the fill coordinator: wanted, in flight, held, coalescing;
* ``gating``      — index fills for join misses, and the keys they block (gates);
* ``bounds``      — key bounds: join-index holes proven empty without a fill;
* ``downstream``  — which keys above a join a delta reaches;
* ``evictor``     — LRU, byte accounting, evicting keys and what depends on them;
* ``publish``     — the seqlock that lets reads of filled keys skip the lock;
* ``reads``       — lookups: key checks, one LSN per batch, presenting rows;
* ``graph``       — nodes, states and explain;
* ``materialize`` — partial, evict-on-miss or full, and why;
* ``state``       — one materialization: holes, pending and filled keys;
* ``runner``      — the interface upqueries are answered through (Spark: ``server.upquery``).

Nothing here imports pyspark.
"""

from partialflow.server.dataflow.facade import Dataflow
from partialflow.server.dataflow.reads import present
from partialflow.server.dataflow.runner import FillResults, UpqueryRunner

__all__ = ["Dataflow", "FillResults", "UpqueryRunner", "present"]

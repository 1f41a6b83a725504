"""The Spark side of upqueries: compile a state's subgraph to one Spark plan, run fills.

* ``runner``         — ``SparkUpqueryRunner``, the dataflow's ``UpqueryRunner`` on Spark;
* ``plan_cache``     — each state's plan kept per base data, a fill's keys bound as SQL;
* ``state_plans``    — a state's rows for a set of keys (keys pushed down to the scans);
* ``operator_plans`` — each operator as a Spark plan;
* ``faults``         — test-only injected scan failures, hangs and delays.
"""

from partialflow.server.upquery.faults import FaultInjector
from partialflow.server.upquery.runner import SparkUpqueryRunner
from partialflow.server.upquery.state_plans import MANY_KEYS, keep_keys, key_filter

__all__ = ["MANY_KEYS", "FaultInjector", "SparkUpqueryRunner", "keep_keys", "key_filter"]

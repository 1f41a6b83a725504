"""SQL: reading statements and planning views.

* ``parse``   — parse SQL text with sqlglot and describe malformed SQL in the user's
  terms (a leaf: sqlglot and ``server.errors`` only, so storage uses it too);
* ``planner`` — a view's SELECT as a tree of operators (``ViewPlan``), names resolved
  against the catalog;
* ``binding`` — name scopes, ``?`` parameters, output names and positions for the planner;
* ``oracle``  — a view's SQL rewritten to answer one key over the base tables alone (the
  background sampler and subscriptions started from an LSN run it on Spark).
"""

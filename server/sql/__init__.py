"""SQL text: parsing statements and saying what is wrong with malformed ones.

``parse`` depends on nothing but sqlglot and ``server.errors``, so every layer that reads
SQL (storage's snapshot queries, the engine's statements, the view planner) parses and
reports errors the same way.
"""

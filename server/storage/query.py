"""``Storage.query``: run one SELECT over the base tables at a snapshot on Spark.

The statement is parsed with sqlglot (Spark dialect) and every base-table reference is
rewritten to a temporary view, unique to this call, registered from ``Snapshot.table_df``.
Nothing else is reachable: qualified names (``parquet.`/path```), table functions and the
reflection functions are refused, so the escape hatch cannot read files or call into the JVM.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.errors import AnalysisException
from sqlglot import exp

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.spark_supervisor import spark_guard
from partialflow.server.sql.parse import parse_statements

if TYPE_CHECKING:
    from partialflow.server.storage.snapshot import Snapshot

_BLOCKED_FUNCTIONS = {"reflect", "java_method", "try_reflect", "input_file_name"}
_MUTATING = (exp.Insert, exp.Delete, exp.Update, exp.Create, exp.Drop, exp.Command, exp.Merge)


def parse_select(sql: str) -> exp.Expression:
    """Parse ``sql`` and check it is exactly one read-only query."""
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgument("query() needs a SELECT statement")
    stmts = parse_statements(sql, dialect="spark")
    if len(stmts) != 1 or not isinstance(stmts[0], exp.Query):
        raise InvalidArgument("only SELECT is allowed in query()")
    tree = stmts[0]
    if any(True for _ in tree.find_all(*_MUTATING)):
        raise InvalidArgument("only SELECT is allowed in query()")
    for f in tree.find_all(exp.Anonymous):
        if str(f.name).lower() in _BLOCKED_FUNCTIONS:
            raise InvalidArgument(f"function {f.name}() is not allowed in query()")
    return tree


def _cte_names(tree: exp.Expression) -> set[str]:
    return {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}


def _to_python(col: pa.ChunkedArray) -> list[Any]:
    """Arrow column -> Python values limited to int/float/str/bool/None where possible."""
    vals = col.to_pylist()
    t = col.type
    if pa.types.is_decimal(t):
        return [None if v is None else (int(v) if t.scale == 0 else float(v)) for v in vals]
    if pa.types.is_temporal(t):
        return [
            v.isoformat()
            if isinstance(v, (_dt.date, _dt.time))
            else (None if v is None else str(v))
            for v in vals
        ]
    return vals


def _float_as_double(tree: exp.Expression) -> exp.Expression:
    """FLOAT and REAL name DOUBLE in partialflow, in CAST as in CREATE TABLE (views compute
    them so); Spark's own FLOAT is 32-bit."""
    for cast in list(tree.find_all(exp.Cast)):
        if cast.args["to"].this == exp.DataType.Type.FLOAT:
            cast.set("to", exp.DataType.build("double"))
    return tree


def run_query(snapshot: Snapshot, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Execute an already-parsed-valid SELECT against ``snapshot``; returns (columns, rows)."""
    tree = parse_select(sql)
    ctes = _cte_names(tree)
    spark = snapshot.spark
    token = uuid.uuid4().hex[:12]
    views: dict[str, str] = {}  # lower table name -> temp view name
    for t in list(tree.find_all(exp.Table)):
        if not isinstance(t.this, exp.Identifier):
            raise InvalidArgument(
                f"only base tables can be queried, not {t.this.sql(dialect='spark')}"
            )
        name = t.name
        if t.args.get("db") or t.args.get("catalog"):
            known = ", ".join(snapshot.table_names()) or "(none)"
            raise NotFound(f"unknown table '{t.sql(dialect='spark')}'; tables are: {known}")
        low = name.lower()
        if low in ctes:
            continue
        snapshot.table_view(name)  # NotFound / FailedPrecondition before any Spark work
        view = views.setdefault(low, f"pf_q{token}_{low}")
        alias = t.args.get("alias")
        t.set("this", exp.to_identifier(view))
        if alias is None:
            # Keep qualified references (t.col) working against the renamed relation.
            t.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
    rewritten = _float_as_double(tree).sql(dialect="spark")
    registered: list[str] = []
    # A Spark that died (or was replaced) under the query: SparkDown, never a Py4J or
    # connection error (spark_supervisor).
    with spark_guard(spark) as session:
        try:
            for low, view in views.items():
                snapshot.table_df(low).createOrReplaceTempView(view)
                registered.append(view)
            try:
                df = session.sql(rewritten)
                columns = list(df.columns)
                table = df.toArrow()
            except AnalysisException as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                for low, view in views.items():
                    msg = msg.replace(view, low)
                raise InvalidArgument(msg) from None
        finally:
            for view in registered:
                try:
                    session.catalog.dropTempView(view)
                except Exception:  # noqa: BLE001 - a dead session took its views with it
                    pass
    if table.num_rows == 0:
        return columns, []
    return columns, list(zip(*[_to_python(c) for c in table.columns], strict=True))

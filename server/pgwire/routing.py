"""SQL text -> engine calls: view reads by key, Spark queries, writes, DDL.

- ``SELECT cols FROM view WHERE key = v [AND key2 = w] [AND col = x] [LIMIT n]`` (a value a
  literal or ``$n``; ``key IN (...)`` reads several keys) is a partial-state lookup; a view
  without parameters is read whole; any other SELECT runs on Spark at a snapshot.
- INSERT ... VALUES, UPDATE ... SET ... WHERE and DELETE ... WHERE on base tables: UPDATE and
  DELETE pick their rows with a snapshot query and change them in one write, which storage
  refuses if any picked row has gone in between (then the statement is picked again).
- CREATE/DROP/EXPLAIN go to ``Engine.execute``.

The analysis of a view read is cached per statement text (``$n`` kept as slots), so a
prepared lookup costs a dictionary hit, the lookup and the encoding.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlglot
import sqlglot.expressions as exp

from partialflow.server.errors import InvalidArgument, NotFound
from partialflow.server.pgwire import types
from partialflow.server.pgwire.errors import SERIALIZATION_FAILURE, PgError, refused
from partialflow.server.pgwire.schema import Schema
from partialflow.server.pgwire.sqltext import bind_params, first_words, param_count
from partialflow.server.sql.parse import parse_statements
from partialflow.server.storage import TableChange

_NO_FROM = re.compile(r"^\s*SELECT\b(?!.*\bFROM\b)", re.I | re.S)
_MARK = "\ue000"  # a parameter's stand-in while a template is analysed
UPDATE_RETRIES = 5


@dataclass
class Answer:
    """What one statement returns: columns (None: no result rows), rows, command tag."""

    columns: list[tuple[str, int]] | None
    rows: list[tuple] = field(default_factory=list)
    tag: str = ""
    lsn: int | None = None  # the LSN a read answer is exact at


@dataclass
class Txn:
    """An open transaction's buffered writes, in statement order: committed as one write
    over every table they touch (``Engine.write_many``)."""

    changes: list[TableChange] = field(default_factory=list)
    failed: bool = False

    def add(self, table: str, inserts: list[tuple], deletes: list[tuple]) -> None:
        if inserts or deletes:
            self.changes.append(TableChange(table, inserts, deletes))


@dataclass
class Slot:
    param: int | None = None  # 0-based parameter index
    value: Any = None

    def get(self, params: list[Any]) -> Any:
        return params[self.param] if self.param is not None else self.value


@dataclass
class ViewRead:
    view: str
    view_sql: str
    columns: list[tuple[str, int]]  # output columns after projection
    project: list[int] | None
    key_slots: list[list[Slot]]  # per key column, its value(s)
    key_oids: list[int]
    filters: list[tuple[int, Slot]]
    limit: int | None


def catalog_settings(ctx: Any) -> dict[str, str]:
    """The session's settings as the catalog reads them (current_setting(), current_user,
    current_database(), pg_backend_pid())."""
    out = dict(getattr(getattr(ctx, "settings", None), "values", {}))
    startup = getattr(ctx, "startup", {})
    out.update({k: str(startup[k]) for k in ("user", "database") if startup.get(k)})
    if getattr(ctx, "pid", None) is not None:
        out["backend_pid"] = str(ctx.pid)
    return out


class Context:
    """What the router needs from the session (implemented there)."""

    floor: int
    txn: Txn | None

    def read(self, fn: Callable[[], Any]) -> Any:  # a cancellable blocking call
        raise NotImplementedError

    def query_read(self, fn: Callable[[], Any]) -> Any:  # the same, as a Spark job group
        raise NotImplementedError


def _value(node: exp.Expression) -> Slot:
    if isinstance(node, exp.Paren):
        return _value(node.this)
    if isinstance(node, exp.Null):
        return Slot(value=None)
    if isinstance(node, exp.Boolean):
        return Slot(value=bool(node.this))
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        inner = _value(node.this)
        return Slot(value=-inner.value)
    if isinstance(node, exp.Literal):
        if node.is_string:
            text = node.this
            if text.startswith(_MARK):
                return Slot(param=int(text[1:]) - 1)
            return Slot(value=text)
        try:
            return Slot(value=int(node.this))
        except ValueError:
            return Slot(value=float(node.this))
    if isinstance(node, exp.Cast):
        return _value(node.this)
    raise refused(f"a view is read by key with literal values or $n, not {node.sql()}")


def _conjuncts(node: Any) -> list[exp.Expression]:
    if node is None:
        return []
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    if isinstance(node, exp.And):
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


class Router:
    def __init__(self, engine: Any, catalog: Any) -> None:
        self.engine = engine
        self.catalog = catalog
        self.schema = Schema(engine)
        self._reads: dict[str, ViewRead] = {}

    # -- analysis --------------------------------------------------------------------------
    def view_read(self, sql: str) -> ViewRead | None:
        """The lookup a SELECT of a view is, or None when it reads no view (a Spark query)."""
        cached = self._reads.get(sql)
        if cached is not None:
            current = self.schema.view(cached.view)
            if current is not None and current["sql"] == cached.view_sql:
                return cached
        read = self._analyse(sql)
        if read is not None:  # a statement that reads no view now may read one later
            if len(self._reads) > 1000:
                self._reads.clear()
            self._reads[sql] = read
        return read

    def _analyse(self, sql: str) -> ViewRead | None:
        n = param_count(sql)
        text = bind_params(sql, [f"{_MARK}{i + 1}" for i in range(n)])
        trees = parse_statements(text)
        if len(trees) != 1 or not isinstance(trees[0], exp.Query):
            raise InvalidArgument(f"expected one SELECT, got {first_words(sql, 1)}")
        tree = trees[0]
        views = [t for t in tree.find_all(exp.Table) if self.schema.view(t.name) is not None]
        if not views:
            return None
        if (not isinstance(tree, exp.Select) or len(views) != 1 or tree.args.get("joins")
                or tree.args.get("group") or tree.args.get("having") or tree.args.get("order")
                or tree.args.get("distinct") or tree.args.get("with_") or tree.args.get("with")
                or tree.args.get("offset") or not isinstance(tree.args.get("from_") or
                                                             tree.args.get("from"), exp.From)
                or len(list(tree.find_all(exp.Table))) != 1):
            raise refused(
                f"view {views[0].name} is read by key: SELECT columns FROM {views[0].name} "
                "WHERE key = value [AND ...] [LIMIT n]; joins, grouping and ordering over views "
                "are not supported (define another view, or query the base tables)")
        view = self.schema.view(views[0].name)
        assert view is not None
        vcols = self.schema.view_columns(view)
        names = {c.lower(): i for i, (c, _) in enumerate(vcols)}
        project: list[int] | None = None
        if not (len(tree.expressions) == 1 and isinstance(tree.expressions[0], exp.Star)):
            project = []
            out_names = []
            for e in tree.expressions:
                inner = e.this if isinstance(e, exp.Alias) else e
                if not isinstance(inner, exp.Column) or inner.name.lower() not in names:
                    raise refused(f"select the columns of view {view['name']} "
                                  f"({', '.join(c for c, _ in vcols)}) or *, not {e.sql()}")
                project.append(names[inner.name.lower()])
                out_names.append(e.alias_or_name)
            columns = [(out_names[i], vcols[j][1]) for i, j in enumerate(project)]
        else:
            columns = list(vcols)
        keys = view["keys"]
        key_index: dict[str, int] = {}
        for i, (root, base, _typ) in enumerate(keys):
            for c in (root, base):
                if c:
                    key_index.setdefault(c.lower(), i)
        slots: list[list[Slot] | None] = [None] * len(keys)
        filters: list[tuple[int, Slot]] = []
        where = tree.args.get("where")
        for term in _conjuncts(where.this if where is not None else None):
            # key = value either way round
            c = (exp.EQ(this=term.right, expression=term.left)
                 if isinstance(term, exp.EQ) and isinstance(term.right, exp.Column) else term)
            if isinstance(c, exp.EQ) and isinstance(c.left, exp.Column):
                col, values = c.left.name.lower(), [_value(c.right)]
            elif isinstance(c, exp.In) and isinstance(c.this, exp.Column) and c.expressions:
                col, values = c.this.name.lower(), [_value(v) for v in c.expressions]
            else:
                raise refused(f"a view is read with WHERE key = value [AND ...] (or key IN "
                              f"(...)), not {c.sql()}")
            if col in key_index and slots[key_index[col]] is None:
                slots[key_index[col]] = values
            elif col in names and len(values) == 1:
                filters.append((names[col], values[0]))
            else:
                raise refused(f"view {view['name']} has no column {col} to read by")
        missing = [keys[i][0] for i, s in enumerate(slots) if s is None]
        if missing:
            raise refused(f"view {view['name']} is read by key: give WHERE "
                          f"{' AND '.join(f'{k} = ...' for k in missing)}")
        limit_node = tree.args.get("limit")
        limit = None
        if limit_node is not None:
            lim = _value(limit_node.expression)
            if lim.param is not None or not isinstance(lim.value, int):
                raise refused("LIMIT of a view read takes a literal number")
            limit = lim.value
        key_oids = [types.oid_of_type(t) if t else 0 for _, _, t in keys]
        return ViewRead(view["name"], view["sql"], columns, project,
                        [s for s in slots if s is not None], key_oids, filters, limit)

    # -- describe --------------------------------------------------------------------------
    def describe(self, sql: str, given: list[int]
                 ) -> tuple[list[int], list[tuple[str, int]] | None]:
        """A statement's parameter OIDs and result columns (None: it returns no rows), or
        columns [] when they are known only once it runs."""
        word = (first_words(sql, 1) or [""])[0]
        if self.catalog.handles(sql):
            oids, cols = self.catalog.describe(sql, given)
            return list(oids), list(cols)
        if word in ("SELECT", "WITH", "VALUES", "("):
            read = self.view_read(sql)
            if read is not None:
                # Parameters compared with the view's keys take the keys' types (the
                # cached analysis: no schema work per statement on this path).
                n = max(param_count(sql), len(given))
                oids = list(given) + [0] * (n - len(given))
                for slots, oid in zip(read.key_slots, read.key_oids, strict=True):
                    for s in slots:
                        if s.param is not None and oid and not oids[s.param]:
                            oids[s.param] = oid
                if not all(oids):
                    found = self.schema.param_oids(sql, given)
                    oids = [o or f for o, f in zip(oids, found, strict=True)]
                return oids, read.columns
            oids = self.schema.param_oids(sql, given)
            return oids, self.schema.query_columns(sql, len(oids)) or []
        oids = self.schema.param_oids(sql, given)
        if word == "EXPLAIN":
            return oids, [("plan", types.OID_TEXT)]
        return oids, None

    # -- running ---------------------------------------------------------------------------
    def select(self, sql: str, params: list[Any], ctx: Context) -> Answer:
        if self.catalog.handles(sql):
            # The text as sent, $n with their values, and the session's settings.
            ans = self.catalog.run(sql, params, catalog_settings(ctx))
            return Answer(list(ans.columns), list(ans.rows), ans.tag)
        if _NO_FROM.match(sql):
            constant = self._constant(bind_params(sql, params))
            if constant is not None:
                return constant
        read = self.view_read(sql)
        if read is None:
            return self._query(bind_params(sql, params), ctx)
        return self._lookup(read, params, ctx)

    def _constant(self, sql: str) -> Answer | None:
        """``SELECT 1`` and other SELECTs of literals only (health checks, pgbench's
        baseline), answered here rather than by a Spark job."""
        try:
            trees = parse_statements(sql)
        except InvalidArgument:
            return None
        if len(trees) != 1 or not isinstance(trees[0], exp.Select) or any(
                trees[0].args.get(k) for k in ("from_", "from", "where", "group", "having")):
            return None
        values, names = [], []
        for e in trees[0].expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            try:
                values.append(_value(inner).value)
            except PgError:
                return None
            names.append(e.alias if isinstance(e, exp.Alias) else "?column?")
        oids = types.column_oids([tuple(values)], len(values))
        return Answer(list(zip(names, oids, strict=True)), [tuple(values)], "SELECT 1")

    def _lookup(self, read: ViewRead, params: list[Any], ctx: Context) -> Answer:
        per_key = []
        for slots, oid in zip(read.key_slots, read.key_oids, strict=True):
            per_key.append([types.convert(s.get(params), oid or None) for s in slots])
        keys = [tuple(k) for k in itertools.product(*per_key)]
        floor = ctx.floor or None
        _, answers = ctx.read(lambda: self.engine.lookup(read.view, keys, min_lsn=floor,
                                                         timeout=None))
        rows = [r for rs, _ in answers for r in rs]
        lsn = max((lsn for _, lsn in answers), default=ctx.floor)
        for i, slot in read.filters:
            want = slot.get(params)
            rows = [r for r in rows if r[i] == want]
        if read.project is not None:
            rows = [tuple(r[i] for i in read.project) for r in rows]
        if read.limit is not None:
            rows = rows[:read.limit]
        return Answer(read.columns, rows, f"SELECT {len(rows)}", lsn)

    def _query(self, sql: str, ctx: Context) -> Answer:
        self._check_floor(ctx)
        text = to_spark(sql)
        result = ctx.query_read(lambda: self.engine.query(text))
        typed = self.schema.annotate(sql) or []
        known: list[int | None] | None = [o for _, o in typed]
        if len(typed) != len(result.columns):
            known = None
        oids = types.column_oids(result.rows, len(result.columns), known)
        cols = list(zip(result.columns, oids, strict=True))
        return Answer(cols, result.rows, f"SELECT {len(result.rows)}", result.lsn)

    def _check_floor(self, ctx: Context) -> None:
        last = self.engine.storage.last_lsn
        if ctx.floor > last:
            raise PgError("22023", f"min_lsn {ctx.floor} is beyond the last acknowledged write "
                          f"(LSN {last})")

    def ddl(self, sql: str, params: list[Any]) -> Answer:
        text = bind_params(sql, params)
        words = first_words(text, 2)
        result = self.engine.execute(text)
        if words[0] == "EXPLAIN":
            return Answer([("plan", types.OID_TEXT)], list(result.rows), "EXPLAIN", result.lsn)
        self._reads.clear()
        return Answer(None, [], " ".join(words), None)

    # -- writes ----------------------------------------------------------------------------
    def write(self, sql: str, params: list[Any], ctx: Context) -> tuple[Answer, int | None]:
        """INSERT/UPDATE/DELETE: the answer and the LSN written (None when buffered in a
        transaction or nothing changed)."""
        text = bind_params(sql, params)
        trees = parse_statements(text)
        if len(trees) != 1:
            raise InvalidArgument(f"expected one statement, got {len(trees)}")
        node = trees[0]
        for _ in range(UPDATE_RETRIES):
            table, inserts, deletes, tag = self._changes(node, ctx)
            if ctx.txn is not None:
                ctx.txn.add(table, inserts, deletes)
                return Answer(None, [], tag), None
            if not inserts and not deletes:
                return Answer(None, [], tag), None
            try:
                lsn = self.engine.write(table, inserts=inserts, deletes=deletes)
            except NotFound:
                if isinstance(node, exp.Insert):
                    raise
                continue  # a picked row changed since the snapshot: pick again
            return Answer(None, [], tag), lsn
        raise PgError(SERIALIZATION_FAILURE, f"the rows of {table} kept changing while "
                      f"{first_words(sql, 1)[0]} picked them ({UPDATE_RETRIES} tries); retry")

    def _table(self, node: exp.Expression, what: str) -> tuple[str, list[str]]:
        target = node.this if isinstance(node, exp.Schema) else node
        if not isinstance(target, exp.Table) or target.args.get("db"):
            raise InvalidArgument(f"{what}: expected a table name")
        name = target.name
        if self.schema.view(name) is not None:
            raise refused(f"{what}: {name} is a view; views are read-only (write its tables)")
        cols = self.schema.tables().get(name.lower())
        if cols is None:
            self.engine.storage.table(name)  # NotFound naming the tables
            raise NotFound(f"unknown table {name!r}")
        return name, [c.name for c in self.engine.storage.table(name).columns]

    def _changes(self, node: exp.Expression, ctx: Context
                 ) -> tuple[str, list[tuple], list[tuple], str]:
        if isinstance(node, exp.Insert):
            return self._insert(node)
        if isinstance(node, (exp.Update, exp.Delete)):
            kind = "UPDATE" if isinstance(node, exp.Update) else "DELETE"
            if node.args.get("returning"):
                raise refused(f"{kind} ... RETURNING is not supported")
            if node.args.get("from_") or node.args.get("from") or node.args.get("using"):
                raise refused(f"{kind} ... FROM/USING is not supported")
            table, names = self._table(node.this, kind)
            selects = [exp.column(n) for n in names]
            sets: dict[int, Any] = {}
            for a in node.expressions if kind == "UPDATE" else []:
                if not isinstance(a, exp.EQ) or not isinstance(a.left, exp.Column):
                    raise InvalidArgument(f"UPDATE: expected SET column = value, got {a.sql()}")
                low = [n.lower() for n in names]
                if a.left.name.lower() not in low:
                    raise NotFound(f"unknown column {a.left.name} of table {table}; columns are "
                                   f"{', '.join(names)}")
                sets[low.index(a.left.name.lower())] = a.right
            q = exp.select(*selects, *[e.copy() for e in sets.values()]).from_(table)
            where = node.args.get("where")
            if where is not None:
                q = q.where(where.this.copy())
            self._check_floor(ctx)
            result = ctx.query_read(lambda: self.engine.query(q.sql(dialect="spark")))
            old = [tuple(r[:len(names)]) for r in result.rows]
            new: list[tuple] = []
            if kind == "UPDATE":
                for r in result.rows:
                    row = list(r[:len(names)])
                    for j, col in enumerate(sets):
                        row[col] = r[len(names) + j]
                    new.append(tuple(row))
            return table, new, old, f"{kind} {len(old)}"
        raise refused(f"unsupported statement {first_words(node.sql(), 1)}")

    def _insert(self, node: exp.Insert) -> tuple[str, list[tuple], list[tuple], str]:
        if node.args.get("returning") or node.args.get("conflict"):
            raise refused("INSERT ... RETURNING / ON CONFLICT is not supported")
        table, names = self._table(node.this, "INSERT")
        values = node.args.get("expression")
        if not isinstance(values, exp.Values):
            raise refused("INSERT: only INSERT ... VALUES is supported")
        rows = [tuple(_literal(v) for v in t.expressions) for t in values.expressions]
        listed = node.this.expressions if isinstance(node.this, exp.Schema) else None
        if listed:
            low = [n.lower() for n in names]
            given = [c.name.lower() for c in listed]
            for c in given:
                if c not in low:
                    raise NotFound(f"INSERT into {table}: unknown column {c}; columns are "
                                   f"{', '.join(names)}")
            if len(set(given)) != len(given):
                raise InvalidArgument(f"INSERT into {table}: a column is listed twice")
            for r in rows:
                if len(r) != len(given):
                    raise InvalidArgument(
                        f"INSERT into {table}: {len(r)} values for {len(given)} columns")
            where = [given.index(n) if n in given else None for n in low]
            rows = [tuple(None if i is None else r[i] for i in where) for r in rows]
        return table, rows, [], f"INSERT 0 {len(rows)}"


def to_spark(sql: str) -> str:
    """A client's SELECT (PostgreSQL's dialect: 'it''s', ::casts) in Spark's, which storage
    reads (there 'it''s' would be two adjacent literals). Left as written if sqlglot cannot
    read it, so storage's own message names the problem."""
    try:
        out = sqlglot.transpile(sql, read="postgres", write="spark")
    except sqlglot.errors.SqlglotError:
        return sql
    return out[0] if len(out) == 1 else sql


def _literal(node: exp.Expression) -> Any:
    try:
        return _value(node).value
    except PgError:
        raise InvalidArgument(f"INSERT: only literal values are supported, not {node.sql()}"
                              ) from None

#!/usr/bin/env node
// A partialflow client in Node.js: @grpc/grpc-js with @grpc/proto-loader, loading the
// wire contract (../../proto/partialflow.proto) at run time. No generated code.
//
//   npm ci
//   node client.js 127.0.0.1:50051 [NAME_PREFIX]
//
// It creates a table, writes rows as a RowBatch and as repeated Row, creates views with a
// `?` parameter, looks keys up (sent as Key messages and as a key batch; each answer is
// one columnar block for all keys), reads
// the typed Stats, and triggers each error status the server answers. One line per step;
// the exit status is non-zero on any unexpected result. Table and view names start with
// NAME_PREFIX (default: a random one), so re-runs against the same server work.
//
// The last line is `SUMMARY {json}`: what was written and read, for tests to check
// independently (int64 values in it are {"int64": "<decimal digits>"}).
'use strict';

const path = require('node:path');
const crypto = require('node:crypto');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO = path.join(__dirname, '..', '..', 'proto', 'partialflow.proto');

// keepCase: field names exactly as in the .proto (num_rows, int_value, min_lsn).
// longs: String: every int64 (LSNs, counters, BIGINT values) arrives as a decimal string,
//   because a JS number is exact only up to 2^53. Convert with BigInt(s).
// enums: String: Column.kind arrives as "INT", "MIXED", ...
// defaults: true: absent scalars/lists read as 0 / "" / [] (as in every proto3 client).
// oneofs: true: a Value carries `kind`, the name of the field that is set.
const LOADER_OPTIONS = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };

// ---- int64 ------------------------------------------------------------------------------

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

// An int64 for a request: a decimal string. protobufjs also takes numbers, but a number
// past 2^53 has already lost digits, and a value outside int64 is silently WRAPPED
// (2^63 is sent as -2^63), so check the range here.
function int64(v) {
  const b = typeof v === 'bigint' ? v : BigInt(v); // throws on 1.5 or "abc"
  if (b < INT64_MIN || b > INT64_MAX) throw new RangeError(`${v} is outside int64`);
  return b.toString();
}

// ---- values, rows and batches -------------------------------------------------------------

// A JS value as a Value message. JS has one number type, so BigInt means BIGINT and a
// number means DOUBLE (pass 3n, not 3, for an integer).
function toValue(v) {
  if (v === null || v === undefined) return { null_value: true }; // NULL is explicit
  switch (typeof v) {
    case 'bigint': return { int_value: int64(v) };
    case 'number': return { double_value: v };
    case 'string': return { string_value: v };
    case 'boolean': return { bool_value: v };
    default: throw new TypeError(`no wire type for ${typeof v}`);
  }
}

// A Value message (as decoded with the options above) as a JS value: int64 -> BigInt.
function fromValue(m) {
  switch (m.kind) {
    case 'int_value': return BigInt(m.int_value);
    case 'double_value': return m.double_value;
    case 'string_value': return m.string_value;
    case 'bool_value': return m.bool_value;
    default: return null; // null_value (an unset kind never comes from the server)
  }
}

function toRow(values) { return { values: values.map(toValue) }; }
function fromRows(rows) { return rows.map((r) => r.values.map(fromValue)); }

const LIST_OF_KIND = { INT: 'ints', DOUBLE: 'doubles', STRING: 'strings', BOOL: 'bools' };
const KIND_OF_TYPE = { bigint: 'INT', number: 'DOUBLE', string: 'STRING', boolean: 'BOOL' };

// Rows (arrays of JS values, all of one length) as a RowBatch. A column whose non-NULL
// values are all of one JS type becomes a typed column: its non-NULL values in the kind's
// list, in row order, and the row positions of its NULLs in `nulls`. Any other column is
// MIXED: exactly one Value per row (NULLs included) in `values`.
function toBatch(rows) {
  const width = rows.length ? rows[0].length : 0;
  const columns = [];
  for (let c = 0; c < width; c++) {
    const cells = rows.map((r) => r[c]);
    const types = new Set(cells.filter((v) => v !== null && v !== undefined).map((v) => typeof v));
    const kind = types.size === 1 ? KIND_OF_TYPE[[...types][0]] : undefined;
    if (kind === undefined) {
      columns.push({ kind: 'MIXED', values: cells.map(toValue) });
      continue;
    }
    const column = { kind, nulls: [] };
    column[LIST_OF_KIND[kind]] = [];
    cells.forEach((v, i) => {
      if (v === null || v === undefined) column.nulls.push(i);
      else column[LIST_OF_KIND[kind]].push(kind === 'INT' ? int64(v) : v);
    });
    columns.push(column);
  }
  return { num_rows: rows.length, columns };
}

// A RowBatch (as decoded with the options above) as rows of JS values. Typed columns hold
// their non-NULL values in order; `nulls` says which rows are NULL instead.
function decodeBatch(batch) {
  if (!batch) return []; // an unset message field reads as null
  const n = batch.num_rows;
  const columns = batch.columns.map((col) => {
    if (col.kind === 'MIXED') return col.values.map(fromValue);
    const list = col[LIST_OF_KIND[col.kind]];
    const nulls = new Set(col.nulls);
    const out = new Array(n);
    let next = 0;
    for (let i = 0; i < n; i++) {
      if (nulls.has(i)) { out[i] = null; continue; }
      const v = list[next++];
      out[i] = col.kind === 'INT' ? BigInt(v) : v;
    }
    if (next !== list.length || out.some((v) => v === undefined)) {
      throw new Error(`malformed batch: a ${col.kind} column has ${list.length} values and ` +
        `${col.nulls.length} nulls for ${n} rows`);
    }
    return out;
  });
  return Array.from({ length: n }, (_, i) => columns.map((col) => col[i]));
}

// A LookupResponse as one { rows, lsn } per key, in the order asked: every key's rows are
// in one RowBatch, key after key; key i's start at offsets[i] and end where the next key's
// start (the last key's at num_rows). `key_lsns`, when not empty, has one LSN per key;
// otherwise every key is exact at `lsn`.
function decodeLookup(response, n) {
  const rows = decodeBatch(response.rows);
  const offsets = response.offsets;
  const lsns = response.key_lsns.length ? response.key_lsns : new Array(n).fill(response.lsn);
  if (offsets.length !== n || lsns.length !== n) {
    throw new Error(`malformed answer: ${offsets.length} offsets, ${lsns.length} LSNs for ${n} keys`);
  }
  return offsets.map((start, i) => ({
    rows: rows.slice(start, i + 1 < n ? offsets[i + 1] : rows.length),
    lsn: BigInt(lsns[i]),
  }));
}

// ---- printing -----------------------------------------------------------------------------

function show(v) {
  if (typeof v === 'bigint') return v.toString();
  if (Array.isArray(v)) return `(${v.map(show).join(', ')})`;
  return JSON.stringify(v);
}

// JSON for the summary line: BigInt -> {"int64": "digits"} (JSON.stringify refuses BigInt).
function toJson(value) {
  return JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? { int64: v.toString() } : v));
}

function sameRows(a, b) { return toJson(sortRows(a)) === toJson(sortRows(b)); }
function sortRows(rows) {
  return [...rows].sort((x, y) => (toJson(x) < toJson(y) ? -1 : toJson(x) > toJson(y) ? 1 : 0));
}

// ---- calls --------------------------------------------------------------------------------

const CODE_NAME = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k]));

function call(stub, method, request, { timeoutMs = 60000 } = {}) {
  return new Promise((resolve, reject) => {
    stub[method](request, { deadline: Date.now() + timeoutMs }, (err, reply) =>
      (err ? reject(err) : resolve(reply)));
  });
}

class Unexpected extends Error {}

function check(ok, message) { if (!ok) throw new Unexpected(message); }

let steps = 0;
function step(text) { steps += 1; console.log(`ok ${steps} - ${text}`); }

// Call `method` and require it to fail with status `code` (a name of grpc.status, or one
// of `also`); returns the status name and the server's message.
async function expectError(stub, method, request, code, { timeoutMs, also = [] } = {}) {
  let reply;
  try {
    reply = await call(stub, method, request, { timeoutMs });
  } catch (err) {
    const got = CODE_NAME[err.code] ?? String(err.code);
    if (got === code || also.includes(got)) return { got, details: err.details };
    throw new Unexpected(`${method}: expected ${code}, got ${got}: ${err.details}`);
  }
  throw new Unexpected(`${method}: expected ${code}, got OK: ${toJson(reply)}`);
}

// ---- the example --------------------------------------------------------------------------

async function main() {
  const address = process.argv[2] || '127.0.0.1:50051';
  const prefix = process.argv[3] || `node_${crypto.randomBytes(4).toString('hex')}`;
  const table = `${prefix}_visit`;
  const byProduct = `${prefix}_by_product`;
  const visitsOf = `${prefix}_visits_of`;

  const definition = protoLoader.loadSync(PROTO, LOADER_OPTIONS);
  const { Partialflow } = grpc.loadPackageDefinition(definition).partialflow.v1;
  const stub = new Partialflow(address, grpc.credentials.createInsecure());
  await new Promise((resolve, reject) =>
    stub.waitForReady(Date.now() + 30000, (err) => (err ? reject(err) : resolve())));
  step(`connected to ${address}; names start with ${prefix}_`);

  // 1. CREATE TABLE
  await call(stub, 'Execute', {
    sql: `CREATE TABLE ${table} (id BIGINT PRIMARY KEY, product TEXT, who TEXT, ` +
      'length BIGINT, score DOUBLE, seen BOOLEAN)',
  });
  step(`Execute CREATE TABLE ${table}`);

  // 2. A RowBatch: typed columns with NULLs, a BIGINT past 2^53, and a MIXED column.
  const BIG = 2n ** 53n + 1n; // 9007199254740993: not representable as a JS number
  const batchRows = [
    [1n, 'Apple', 'Alice', 10n, 1.5, true],
    [2n, 'Apple', null, 20n, 2.25, null],
    [3n, 'Banana', 'Bob', null, null, false],
    [4n, 'Carrot', 'Eve', BIG, 7, true],
  ];
  const batch = toBatch(batchRows);
  // JS numbers are all DOUBLE here, so score is typed DOUBLE with nulls [2]. Show MIXED
  // explicitly as well: one Value per row (a BIGINT-valued cell is fine for DOUBLE).
  batch.columns[4] = { kind: 'MIXED', values: [toValue(1.5), toValue(2.25), toValue(null), { int_value: '7' }] };
  check(batch.columns[2].kind === 'STRING' && toJson(batch.columns[2].nulls) === '[1]', 'who: STRING, nulls [1]');
  check(batch.columns[3].kind === 'INT' && batch.columns[3].ints[2] === BIG.toString(), 'length: INT as strings');
  const w1 = await call(stub, 'Write', { table, insert_batch: batch });
  const lsn1 = BigInt(w1.lsn);
  check(lsn1 > 0n, `Write answered LSN ${w1.lsn}`);
  step(`Write insert_batch: ${batch.num_rows} rows (columns ${batch.columns.map((c) => c.kind).join(',')}) at LSN ${lsn1}`);

  // 3. The same kind of data as repeated Row: one Value per cell.
  const plainRows = [
    [5n, 'Banana', 'Carol', 40n, 4.0, true],
    [6n, null, 'Dan', 5n, null, null],
  ];
  const w2 = await call(stub, 'Write', { table, inserts: plainRows.map(toRow) });
  const lsn2 = BigInt(w2.lsn);
  check(lsn2 > lsn1, `LSNs increase: ${lsn2} after ${lsn1}`);
  step(`Write inserts: ${plainRows.length} rows as repeated Row at LSN ${lsn2}`);
  const written = [...batchRows, ...plainRows];

  // 4. Views with a `?` parameter.
  await call(stub, 'Execute', {
    sql: `CREATE VIEW ${byProduct} AS SELECT product, COUNT(*) AS visits, ` +
      `SUM(length) AS total_length, MAX(score) AS best FROM ${table} WHERE product = ? GROUP BY product`,
  });
  await call(stub, 'Execute', {
    sql: `CREATE VIEW ${visitsOf} AS SELECT id, who, length, seen FROM ${table} WHERE product = ?`,
  });
  step(`Execute CREATE VIEW ${byProduct} (aggregate) and ${visitsOf} (rows), each keyed by product = ?`);

  // 5. Lookup: the same keys sent as Key messages and as a key batch (columnar), each
  // answered as one columnar block; read-your-writes with min_lsn (an int64: a string).
  const keys = ['Apple', 'Banana', 'Carrot', 'Durian'];
  const lookups = {};
  for (const view of [byProduct, visitsOf]) {
    const asKeys = await call(stub, 'Lookup', {
      view, keys: keys.map((k) => ({ values: [toValue(k)] })), min_lsn: int64(lsn2),
    });
    const asBatch = await call(stub, 'Lookup', {
      view, key_batch: toBatch(keys.map((k) => [k])), min_lsn: int64(lsn2),
    });
    const fromKeys = decodeLookup(asKeys, keys.length);
    const fromBatch = decodeLookup(asBatch, keys.length);
    lookups[view] = { columns: asKeys.columns, results: {} };
    fromKeys.forEach((res, i) => {
      const other = fromBatch[i];
      check(res.lsn >= lsn2 && other.lsn >= lsn2, `${view}: answers at LSN >= ${lsn2}`);
      check(sameRows(res.rows, other.rows),
        `${view} ${keys[i]}: key answer ${show(res.rows)} != key batch answer ${show(other.rows)}`);
      lookups[view].results[keys[i]] = res;
      console.log(`   ${view}[${keys[i]}] @${res.lsn}: ${res.rows.map(show).join(' ') || '(no rows)'}`);
    });
    step(`Lookup ${view}: ${keys.length} keys as Keys and as a key batch, answers agree (columns ${asKeys.columns.join(',')})`);
  }
  // What the aggregate must say, from the rows written above.
  const apple = lookups[byProduct].results.Apple.rows;
  check(sameRows(apple, [['Apple', 2n, 30n, 2.25]]), `Apple aggregate: ${show(apple)}`);
  const carrot = lookups[visitsOf].results.Carrot.rows;
  check(sameRows(carrot, [[4n, 'Eve', BIG, true]]), `Carrot rows keep the int64 exactly: ${show(carrot)}`);
  check(lookups[byProduct].results.Durian.rows.length === 0, 'Durian: no rows');
  step(`Lookup answers are right (BIGINT ${BIG} came back exact)`);

  // 6. Stats: typed int64 counters (strings -> BigInt).
  const stats = await call(stub, 'Stats', {});
  check(BigInt(stats.lsn) >= lsn2, `Stats lsn ${stats.lsn} >= ${lsn2}`);
  const vs = stats.views[byProduct];
  check(vs !== undefined, `Stats has ${byProduct}`);
  check(BigInt(vs.keys_filled) >= 1n && BigInt(vs.misses) >= 1n, `${byProduct} stats: ${toJson(vs)}`);
  step(`Stats: lsn ${BigInt(stats.lsn)}, applied_lsn ${BigInt(stats.applied_lsn)}, ` +
    `${byProduct}: keys_filled ${vs.keys_filled} hits ${vs.hits} misses ${vs.misses} upqueries ${vs.upqueries}`);

  // 7. Errors. Each one must change nothing: the table is re-read at the end.
  let e = await expectError(stub, 'Execute', { sql: `SELEC * FROM ${table}` }, 'INVALID_ARGUMENT');
  step(`INVALID_ARGUMENT for bad SQL: ${e.details}`);
  // Malformed batch: an INT column with 1 value for 2 rows and no nulls.
  e = await expectError(stub, 'Write', {
    table,
    insert_batch: { num_rows: 2, columns: [{ kind: 'INT', ints: ['7'] }] },
  }, 'INVALID_ARGUMENT');
  step(`INVALID_ARGUMENT for a malformed batch: ${e.details}`);
  e = await expectError(stub, 'Write', { table, inserts: [toRow([9n, 'Apple', 'X', 'long', 1.0, true])] },
    'INVALID_ARGUMENT');
  step(`INVALID_ARGUMENT for a TEXT in a BIGINT column: ${e.details}`);
  e = await expectError(stub, 'Lookup', { view: `${prefix}_no_such_view`, keys: [toRow(['Apple'])] }, 'NOT_FOUND');
  step(`NOT_FOUND for an unknown view: ${e.details}`);
  e = await expectError(stub, 'Write', { table: `${prefix}_no_such_table`, inserts: [toRow([1n])] }, 'NOT_FOUND');
  step(`NOT_FOUND for an unknown table: ${e.details}`);
  e = await expectError(stub, 'Execute', { sql: `CREATE TABLE ${table} (id BIGINT)` }, 'ALREADY_EXISTS');
  step(`ALREADY_EXISTS for CREATE TABLE twice: ${e.details}`);
  e = await expectError(stub, 'Write', { table, inserts: [toRow([1n, 'Apple', 'Zed', 1n, 1.0, true])] },
    'ALREADY_EXISTS');
  step(`ALREADY_EXISTS for a duplicate PRIMARY KEY: ${e.details}`);
  // A misspelled field name: protobufjs drops `int_val`, so the Value has no kind set.
  // The server refuses it (it is not read as NULL).
  e = await expectError(stub, 'Write', { table, inserts: [{ values: [
    toValue(8n), toValue('Apple'), toValue('Zoe'), { int_val: '7' }, toValue(1.0), toValue(true)] }] },
  'INVALID_ARGUMENT');
  step(`INVALID_ARGUMENT for a Value with no kind set (misspelled int_val): ${e.details}`);
  // min_lsn far beyond the last write: refused at once (waiting could not help). A short
  // deadline, so that a server that waited instead would fail this step quickly with
  // DEADLINE_EXCEEDED.
  const far = int64(BigInt(stats.lsn) + 1000000n);
  const started = Date.now();
  e = await expectError(stub, 'Lookup', { view: byProduct, keys: [toRow(['Apple'])], min_lsn: far },
    'OUT_OF_RANGE', { timeoutMs: 5000 });
  const minLsnStatus = e.got;
  step(`OUT_OF_RANGE for min_lsn ${far} in ${Date.now() - started} ms: ${e.details}`);

  // 8. Nothing above was written: the table is exactly the six rows.
  const q = await call(stub, 'Query', { sql: `SELECT id, product, who, length, score, seen FROM ${table}`, columnar: true });
  const stored = decodeBatch(q.batch);
  check(sameRows(stored, written), `table holds ${show(stored)}, expected ${show(written)}`);
  step(`Query: ${table} holds exactly the ${stored.length} rows written, at LSN ${BigInt(q.lsn)}`);

  console.log(`SUMMARY ${toJson({
    prefix, table, views: [byProduct, visitsOf], lsns: [lsn1, lsn2], written, keys, lookups,
    min_lsn_status: minLsnStatus,
  })}`);
  stub.close();
}

main().then(
  () => { console.log(`all ${steps} steps passed`); },
  (err) => {
    const what = err instanceof Unexpected ? 'unexpected result' : 'error';
    const code = err.code !== undefined && CODE_NAME[err.code] ? ` ${CODE_NAME[err.code]}` : '';
    console.log(`FAIL after ${steps} steps: ${what}${code}: ${err.details || err.message}`);
    process.exitCode = 1;
  },
);

// bench/documents_node.js - the document rows done by the Node.js `mongodb`
// driver (the version bench/package.json pins): the same four operations,
// sizes and document shape as bench/documents.lua, one round per run.
//
// usage: node documents_node.js <uri> <db> <label> <round> [n] [updates] [bulk]
//
// bench/run.sh installs the driver with `npm ci` under bench/out/node and
// points NODE_PATH there. Prints "RESULT docs.<label>.r<round>.<op>_ms <ms>"
// per operation (wall time) and <op>_cpu_ms (the process's CPU time over the
// same span), and docs.<label>.fields / docs.<label>.version. Documents
// are built as objects before the clock starts; decoding visits every field
// of every document, nested ones too, as the Lua side does.
'use strict';

const fs = require('fs');
const path = require('path');
const { MongoClient, Long } = require('mongodb');

const BODY = 'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et ' +
  'dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip.';
const TAGS = ['news', 'tech', 'lua', 'mongodb', 'bench'];
const STATUS = ['draft', 'published', 'archived'];
const BASE_DATE = 1700000000000;
const BIG = 5000000000;

// _id and bytes are int64 (Long: a plain number beyond int32 would be sent
// as a double), views and meta.words int32 (plain numbers).
function makeDoc(i) {
  return {
    _id: Long.fromNumber(i),
    title: `Article number ${i} about documents`,
    author: `author-${i % 97}`,
    body: BODY,
    status: STATUS[i % 3],
    views: i % 1000,
    bytes: Long.fromNumber(BIG + i),
    score: i + 0.5,
    published: i % 2 === 0,
    created: new Date(BASE_DATE + i * 1000),
    tags: [TAGS[i % 5], TAGS[(i + 1) % 5], TAGS[(i + 2) % 5]],
    meta: { lang: 'en', words: 100 + (i % 50), source: `feed-${i % 7}` },
  };
}

function updateId(k, n, offset) {
  return 1 + (((k - 1) * 7 + offset) % n);
}

// score is always fractional (k + 0.25), so it goes as a double.
function makeUpdate(k) {
  return { $set: { score: k + 0.25, status: 'edited' }, $inc: { views: 1 } };
}

// Every field of a decoded document, recursively; returns the count.
function visit(value) {
  let fields = 0;
  for (const key in value) {
    const v = value[key];
    fields++;
    if (v !== null && typeof v === 'object' && !(v instanceof Date)) fields += visit(v);
  }
  return fields;
}

// Wall and process CPU time (ms) of each timed span, in order.
class Clock {
  constructor() { this.wall = []; this.cpu = []; }
  start() { this.t0 = process.hrtime.bigint(); this.c0 = process.cpuUsage(); }
  stop() {
    this.wall.push(Number(process.hrtime.bigint() - this.t0) / 1e6);
    const c = process.cpuUsage(this.c0);
    this.cpu.push((c.user + c.system) / 1e3);
  }
}

async function roundOf(db, name, n, updates, bulk) {
  const coll = db.collection(name);
  await coll.drop().catch(() => {});
  const docs = [];
  for (let i = 1; i <= n; i++) docs.push(makeDoc(i));
  const clock = new Clock();
  clock.start();
  await coll.insertMany(docs, { ordered: false });
  clock.stop();

  clock.start();
  let fields = 0;
  let count = 0;
  for await (const doc of coll.find({})) {
    fields += visit(doc);
    count++;
  }
  clock.stop();
  if (count !== n) throw new Error(`find returned ${count} documents, expected ${n}`);

  clock.start();
  for (let k = 1; k <= updates; k++) {
    await coll.updateOne({ _id: Long.fromNumber(updateId(k, n, 0)) }, makeUpdate(k));
  }
  clock.stop();

  const ops = [];
  for (let k = 1; k <= bulk; k++) {
    ops.push({ updateOne: { filter: { _id: Long.fromNumber(updateId(k, n, 3)) }, update: makeUpdate(k) } });
  }
  clock.start();
  await coll.bulkWrite(ops, { ordered: false });
  clock.stop();
  await coll.drop().catch(() => {});
  return { clock, fields };
}

async function main() {
  const argv = process.argv.slice(2);
  if (argv.length < 4 || argv.length > 7) {
    console.error('usage: node documents_node.js <uri> <db> <label> <round> [n] [updates] [bulk]');
    process.exit(2);
  }
  const [uri, dbname, label, round] = argv;
  const n = Number(argv[4] || 10000);
  const updates = Number(argv[5] || 1000);
  const bulk = Number(argv[6] || 1000);
  const client = new MongoClient(uri, { appName: 'mongostore-bench-documents' });
  await client.connect();
  const db = client.db(dbname);
  await db.command({ ping: 1 });
  await roundOf(db, 'warm', Math.floor(n / 10) + 1, Math.floor(updates / 10) + 1, Math.floor(bulk / 10) + 1);
  const { clock, fields } = await roundOf(db, 'docs', n, updates, bulk);
  const ops = ['insert_many', 'find', 'update_one', 'bulk_write'];
  console.error(`documents_node ${label} round ${round}: ` +
    ops.map((op, i) => `${op} ${clock.wall[i].toFixed(1)} ms (cpu ${clock.cpu[i].toFixed(1)})`).join(' ') +
    ` (${fields} fields decoded)`);
  const out = [];
  ops.forEach((op, i) => {
    out.push(`RESULT docs.${label}.r${round}.${op}_ms ${clock.wall[i].toFixed(2)}`);
    out.push(`RESULT docs.${label}.r${round}.${op}_cpu_ms ${clock.cpu[i].toFixed(2)}`);
  });
  out.push(`RESULT docs.${label}.fields ${fields}`);
  const pkg = path.join(path.dirname(require.resolve('mongodb')), '..', 'package.json');
  const version = JSON.parse(fs.readFileSync(pkg, 'utf8')).version;
  out.push(`RESULT docs.${label}.version mongodb (Node.js driver) ${version}, Node.js ${process.versions.node}`);
  process.stdout.write(out.join('\n') + '\n');
  await client.close();
}

main().catch((err) => {
  console.error('documents_node:', err && err.stack ? err.stack : err);
  process.exit(1);
});

// bench/models_mongoose.js - the model rows done by Mongoose (the version
// bench/package.json pins): the same rows, sizes and article as bench/models.lua,
// one round per run.
//
// usage: node models_mongoose.js <uri> <db> <label> <round> [n] [saves] [bulk] [updates]
//
// The schema is the model's: strings, a views Number, a score Number, a boolean,
// tags [String], timestamps as created_at / updated_at, and the version key
// named rev with optimisticConcurrency, so a save is guarded by and increments
// rev as the model's revision is. Rows: insertMany (unordered) of n plain
// objects, find() of every document (hydrated, change-tracked), `saves`
// doc.save() after views + 1, one Model.bulkSave of `bulk` such documents, and
// `updates` findByIdAndUpdate({ $inc: { views: 1, rev: 1 } }, { new: true })
// (the model's atomic update also increments its revision; Mongoose adds
// updated_at). bench/run.sh installs Mongoose with `npm ci` under
// bench/out/node and points NODE_PATH there. Prints
// "RESULT models.<label>.r<round>.<op>_ms <ms>" and <op>_cpu_ms per row after an
// untimed warm-up round at a tenth of the sizes, and models.<label>.version.
'use strict';

const fs = require('fs');
const path = require('path');
const mongoose = require('mongoose');

const BODY = 'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et ' +
  'dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip.';
const TAGS = ['news', 'tech', 'lua', 'mongodb', 'bench'];
const STATUS = ['draft', 'published', 'archived'];

function makeDoc(i) {
  return {
    title: `Article number ${i} about models`,
    author: `author-${i % 97}`,
    body: BODY,
    status: STATUS[i % 3],
    views: i % 1000,
    score: i + 0.5,
    published: i % 2 === 0,
    tags: [TAGS[i % 5], TAGS[(i + 1) % 5], TAGS[(i + 2) % 5]],
  };
}

function pick(k, n, offset) {
  return 1 + (((k - 1) * 7 + offset) % n);
}

class Clock {
  constructor() { this.wall = []; this.cpu = []; }
  start() { this.t0 = process.hrtime.bigint(); this.c0 = process.cpuUsage(); }
  stop() {
    this.wall.push(Number(process.hrtime.bigint() - this.t0) / 1e6);
    const c = process.cpuUsage(this.c0);
    this.cpu.push((c.user + c.system) / 1e3);
  }
}

function defineModel(conn, name) {
  const schema = new mongoose.Schema({
    title: { type: String, default: '' },
    author: String,
    body: String,
    status: String,
    views: { type: Number, default: 0 },
    score: Number,
    published: Boolean,
    tags: { type: [String], default: [] },
  }, {
    collection: name,
    timestamps: { createdAt: 'created_at', updatedAt: 'updated_at' },
    versionKey: 'rev',
    optimisticConcurrency: true,
    autoIndex: false,
    autoCreate: false,
  });
  return conn.model(`Article_${name}`, schema);
}

async function roundOf(conn, name, n, saves, bulk, updates) {
  const Article = defineModel(conn, name);
  await Article.collection.drop().catch(() => {});
  // the guard of every save as an index, as bench/models.lua creates it
  await Article.collection.createIndex({ _id: 1, rev: 1 }, { unique: true });
  const list = [];
  for (let i = 1; i <= n; i++) list.push(makeDoc(i));
  const clock = new Clock();

  clock.start();
  const inserted = await Article.insertMany(list, { ordered: false });
  clock.stop();
  if (inserted.length !== n) throw new Error(`insertMany inserted ${inserted.length}, expected ${n}`);

  clock.start();
  const docs = await Article.find({});
  clock.stop();
  if (docs.length !== n) throw new Error(`find returned ${docs.length} documents, expected ${n}`);

  clock.start();
  for (let k = 1; k <= saves; k++) {
    const doc = docs[pick(k, n, 0) - 1];
    doc.views += 1;
    await doc.save();
  }
  clock.stop();

  const batch = [];
  for (let k = 1; k <= bulk; k++) {
    const doc = docs[pick(k, n, 3) - 1];
    doc.views += 1;
    batch.push(doc);
  }
  clock.start();
  const res = await Article.bulkSave(batch);
  clock.stop();
  const matched = res.matchedCount !== undefined ? res.matchedCount : res.nMatched;
  if (matched !== bulk) throw new Error(`bulkSave matched ${matched}, expected ${bulk}`);

  clock.start();
  for (let k = 1; k <= updates; k++) {
    const doc = await Article.findByIdAndUpdate(docs[pick(k, n, 5) - 1]._id, { $inc: { views: 1, rev: 1 } },
      { new: true });
    if (!doc) throw new Error('findByIdAndUpdate found nothing');
  }
  clock.stop();
  await Article.collection.drop().catch(() => {});
  conn.deleteModel(`Article_${name}`);
  return clock;
}

async function main() {
  const argv = process.argv.slice(2);
  if (argv.length < 4 || argv.length > 8) {
    console.error('usage: node models_mongoose.js <uri> <db> <label> <round> [n] [saves] [bulk] [updates]');
    process.exit(2);
  }
  const [uri, dbname, label, round] = argv;
  const n = Number(argv[4] || 10000);
  const saves = Number(argv[5] || 1000);
  const bulk = Number(argv[6] || 1000);
  const updates = Number(argv[7] || 1000);
  const conn = await mongoose.createConnection(uri, { dbName: dbname, appName: 'mongostore-bench-models' }).asPromise();
  await roundOf(conn, 'warm', Math.floor(n / 10) + 1, Math.floor(saves / 10) + 1, Math.floor(bulk / 10) + 1,
    Math.floor(updates / 10) + 1);
  const clock = await roundOf(conn, 'articles', n, saves, bulk, updates);
  const ops = ['insert', 'load', 'save', 'bulk_save', 'update'];
  console.error(`models_mongoose ${label} round ${round}: ` +
    ops.map((op, i) => `${op} ${clock.wall[i].toFixed(1)} ms (cpu ${clock.cpu[i].toFixed(1)})`).join(' '));
  const out = [];
  ops.forEach((op, i) => {
    out.push(`RESULT models.${label}.r${round}.${op}_ms ${clock.wall[i].toFixed(2)}`);
    out.push(`RESULT models.${label}.r${round}.${op}_cpu_ms ${clock.cpu[i].toFixed(2)}`);
  });
  const pkg = path.join(path.dirname(require.resolve('mongoose')), 'package.json');
  const version = JSON.parse(fs.readFileSync(pkg, 'utf8')).version;
  out.push(`RESULT models.${label}.version Mongoose ${version}, Node.js ${process.versions.node}`);
  process.stdout.write(out.join('\n') + '\n');
  await conn.close();
}

main().catch((err) => {
  console.error('models_mongoose:', err && err.stack ? err.stack : err);
  process.exit(1);
});

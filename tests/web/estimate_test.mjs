// The workbench's estimate (web/js/estimate.js) on made-up jobs whose server
// bounds lie on a known line: bound = 500e6 + 1000 B × (batch × max_length × 2).
// Run: node tests/web/estimate_test.mjs   (CTest: web_estimate)
import assert from 'node:assert/strict';
import path from 'node:path';
import {fileURLToPath, pathToFileURL} from 'node:url';

// What the module touches of a browser: the key store and fetch (the
// reference job's metric rows: tokens/s 100 and 120, a peak of 300 MB).
globalThis.localStorage = {getItem: () => '', setItem() {}, removeItem() {}};
globalThis.fetch = async () => ({
  ok: true,
  headers: {get: () => 'application/json'},
  json: async () => ({data: [{kind: 'step', step: 1, tokens_per_s: 100}, {kind: 'step', step: 2, tokens_per_s: 120},
    {kind: 'eval', step: 2, peak_memory_bytes: 3e8}]}),
});
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const {estimate} = await import(pathToFileURL(path.join(root, 'web', 'js', 'estimate.js')).href);

const bound = tokens => 500e6 + 1000 * tokens;
const job = (id, {batch, maxLength, rank, levers = {}, bytes, type = 'orpo'}) => ({
  id, model: 'm', status: 'succeeded', step: 5, estimated_memory_bytes: bytes ?? bound(batch * maxLength * 2),
  method: {type, [type]: {hyperparameters: {batch_size: batch, max_length: maxLength, rank, ...levers}}},
});
const jobs = [
  job('a', {batch: 1, maxLength: 64, rank: 4}),
  job('b', {batch: 2, maxLength: 128, rank: 4}),
  job('other-rank', {batch: 1, maxLength: 64, rank: 8, bytes: 9e9}),
  job('other-levers', {batch: 1, maxLength: 64, rank: 4, levers: {segment_size: 4}, bytes: 7e9}),
  job('sft', {batch: 1, maxLength: 64, rank: 4, type: 'supervised', bytes: 6e9}),
];
const plan = {model: 'm', preference: true, levers: {}, rank: 4, batch: 4, maxLength: 256, steps: 10, meanLength: 100};

// Another shape: the line through a and b, at 4 × 256 × 2 tokens.
let e = await estimate(plan, jobs);
assert.equal(e.estimatedBytes, bound(4 * 256 * 2));
assert.deepEqual(e.fittedFrom, ['a', 'b']);
assert.equal(e.exact, false);
// Time: 10 steps × 4 × min(256, 100) × 2 tokens at the median 120 tok/s.
assert.equal(e.tokensPerStep, 800);
assert.equal(e.seconds, 10 * 800 / 120);

// The same shape: that job's bound and measured peak.
e = await estimate({...plan, batch: 1, maxLength: 64}, jobs);
assert.equal(e.exact, true);
assert.equal(e.reference.id, 'a');
assert.equal(e.estimatedBytes, bound(128));
assert.equal(e.peakBytes, 3e8);

// Another rank: no memory (only one job of rank 8, and other ranks never mix); time still from the levers' jobs.
e = await estimate({...plan, rank: 8}, jobs);
assert.equal(e.estimatedBytes, null);
assert.equal(e.reference.id, 'a');
assert.ok(e.seconds > 0);

// Other levers, another method kind: only their own jobs count.
e = await estimate({...plan, levers: {segment_size: 4}, batch: 1, maxLength: 64}, jobs);
assert.equal(e.estimatedBytes, 7e9);
e = await estimate({...plan, preference: false, batch: 1, maxLength: 64}, jobs);
assert.equal(e.estimatedBytes, 6e9);
e = await estimate({...plan, levers: {mlp_chunk_size: 256}}, jobs);
assert.equal(e.reference, null);
assert.equal(e.seconds, null);
console.log('web_estimate: ok');

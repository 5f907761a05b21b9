// Fine-tune: a dataset (POST /v1/files, or one uploaded before) with its
// preview (GET /v1/files/{id}/preview: rows, token lengths through the
// model's chat template, rows longer than max_length), a method, its
// hyperparameters, a memory preset, an estimate, and
// POST /v1/fine_tuning/jobs.
import {get, post, del, request} from './api.js';
import {$, el, guarded, formatBytes, formatSeconds, formatNumber} from './ui.js';
import {baseModel, openTab} from './state.js';
import {listJobs} from './jobs_client.js';
import {estimate} from './estimate.js';

const METHODS = [
  {type: 'supervised', name: 'SFT', kind: 'sft',
   why: 'Imitate the responses: cross-entropy on the assistant tokens. Needs messages, prompt/completion or text rows.'},
  {type: 'orpo', name: 'ORPO', kind: 'preference',
   why: 'SFT on the chosen answer plus λ × an odds-ratio penalty on the rejected one; no reference model.'},
  {type: 'dpo', name: 'DPO', kind: 'preference',
   why: 'Raise chosen over rejected relative to the frozen base (the reference); β sets how far it may move.'},
  {type: 'simpo', name: 'SimPO', kind: 'preference',
   why: 'Length-normalised log-prob gap with a target margin γ; no reference model, β scales the reward.'},
  {type: 'ipo', name: 'IPO', kind: 'preference',
   why: 'DPO with a squared loss that holds the margin near 1/(2β) instead of pushing it without bound.'},
];

// Memory levers (docs/training.md, "Memory levers") as presets. Each sets
// the lever fields; "custom" leaves them as edited.
const PRESETS = [
  {id: 'speed', name: 'Fastest', why: 'Keeps every layer\'s activations for the backward: most memory, no recompute.',
   levers: {segment: 0, headChunk: 4096, mlpChunk: 0, prefixShared: false, offload: false, offloadAttention: false}},
  {id: 'balanced', name: 'Balanced', why: 'Segments of 4 layers recomputed in the backward; preference pairs share their prompt.',
   levers: {segment: 4, headChunk: 4096, mlpChunk: 0, prefixShared: true, offload: false, offloadAttention: false}},
  {id: 'low', name: 'Least memory', why: 'Recompute every layer, the MLP in 256-row chunks, a 1024-wide head; boundaries to the host on CUDA.',
   levers: {segment: 1, headChunk: 1024, mlpChunk: 256, prefixShared: true, offload: 'cuda', offloadAttention: 'cuda'}},
  {id: 'custom', name: 'Custom', why: 'The levers below as you set them.', levers: null},
];

let files = [];
let previewInfo = null;   // the training file's preview
let method = 'orpo';
let preset = 'balanced';
let estimateSeq = 0;

export function init() {
  $('#ft-upload-form').addEventListener('submit', e => {
    e.preventDefault();
    upload();
  });
  $('#ft-training-file').addEventListener('change', () => preview());
  $('#ft-delete-file').addEventListener('click', () => deleteFile());
  $('#ft-max-length').addEventListener('change', () => preview());
  $('#ft-start').addEventListener('click', () => start());
  $('#ft-methods').replaceChildren(...METHODS.map(m => el('label', {class: 'method-card', dataset: {method: m.type}},
    el('input', {type: 'radio', name: 'ft-method', value: m.type, onchange: () => setMethod(m.type)}),
    el('strong', {}, m.name), el('span', {class: 'why'}, m.why))));
  $('#ft-presets').replaceChildren(...PRESETS.map(p => el('label', {class: 'preset-card', dataset: {preset: p.id}},
    el('input', {type: 'radio', name: 'ft-preset', value: p.id, onchange: () => setPreset(p.id)}),
    el('strong', {}, p.name), el('span', {class: 'why'}, p.why))));
  for (const id of ['#ft-segment', '#ft-head-chunk', '#ft-mlp-chunk', '#ft-prefix-shared', '#ft-offload', '#ft-offload-attention']) {
    $(id).addEventListener('change', () => {
      setPreset('custom', false);
      updateEstimate();
    });
  }
  for (const id of ['#ft-steps', '#ft-batch', '#ft-device', '#ft-rank']) $(id).addEventListener('change', () => {
    if (id === '#ft-device' && preset !== 'custom') setPreset(preset);
    updateEstimate();
  });
  setMethod(method);
  setPreset(preset);
}

export function show() {
  refresh();
}

export async function refresh() {
  const list = await guarded('Reading the uploaded files (GET /v1/files)', () => get('v1/files?purpose=fine-tune'));
  if (!list) return;
  files = list.data || [];
  fillFileSelects($('#ft-training-file').value);
}

function fileLabel(f) {
  return `${f.filename} · ${f.kind || '?'} · ${f.rows ?? '?'} rows · ${f.id}`;
}

function fillFileSelects(keep) {
  const training = $('#ft-training-file');
  const validation = $('#ft-validation-file');
  const keepValidation = validation.value;
  training.replaceChildren(...(files.length ? files.map(f => el('option', {value: f.id}, fileLabel(f)))
    : [el('option', {value: ''}, 'no files yet: upload one')]));
  validation.replaceChildren(el('option', {value: ''}, 'none (evaluate on the training set)'),
    ...files.map(f => el('option', {value: f.id}, fileLabel(f))));
  if (keep && files.some(f => f.id === keep)) training.value = keep;
  if (files.some(f => f.id === keepValidation)) validation.value = keepValidation;
  preview();
}

async function upload() {
  const input = $('#ft-file');
  if (!input.files.length) return;
  const form = new FormData();
  form.append('purpose', 'fine-tune');
  form.append('file', input.files[0], input.files[0].name);
  $('#ft-upload').disabled = true;
  const file = await guarded(`Uploading ${input.files[0].name} (POST /v1/files)`, () => request('v1/files', {method: 'POST', form}));
  $('#ft-upload').disabled = false;
  if (!file) return;
  input.value = '';
  files = [file, ...files.filter(f => f.id !== file.id)];
  fillFileSelects(file.id);
  // A preference file suggests a preference method, and the other way round.
  const kind = METHODS.find(m => m.type === method).kind;
  if (file.kind && kind !== file.kind) setMethod(file.kind === 'sft' ? 'supervised' : 'orpo');
}

async function deleteFile() {
  const id = $('#ft-training-file').value;
  if (!id) return;
  const done = await guarded(`Deleting ${id}`, () => del(`v1/files/${encodeURIComponent(id)}`));
  if (done) await refresh();
}

function selectedFile() {
  return files.find(f => f.id === $('#ft-training-file').value) || null;
}

async function preview() {
  const file = selectedFile();
  previewInfo = null;
  markMethodFit();
  if (!file) {
    $('#ft-preview').hidden = true;
    updateEstimate();
    return;
  }
  const maxLength = Number($('#ft-max-length').value) || 2048;
  const info = await guarded(`Previewing ${file.filename}`,
    () => get(`v1/files/${encodeURIComponent(file.id)}/preview?max_length=${maxLength}`));
  if (!info || selectedFile() !== file) return;
  previewInfo = info;
  renderPreview(info);
  markMethodFit();
  updateEstimate();
}

let histogram = null;
function renderPreview(info) {
  $('#ft-preview').hidden = false;
  const t = info.token_lengths || {};
  const stat = (label, value, cls) => el('span', {class: cls}, `${label} `, el('b', {}, value));
  $('#ft-preview-stats').replaceChildren(
    stat('rows', String(info.rows)), stat('kind', info.kind),
    stat('tokens', `min ${t.min} · median ${t.p50} · mean ${formatNumber(t.mean, 3)} · p95 ${t.p95} · max ${t.max}`),
    stat('cut at', `${info.max_length} tokens: ${info.truncated_rows} row${info.truncated_rows === 1 ? '' : 's'}`,
      info.truncated_rows > 0 ? 'warn' : null));
  $('#ft-preview-stats').dataset.truncated = String(info.truncated_rows);
  const edges = (t.histogram && t.histogram.edges) || [];
  const counts = (t.histogram && t.histogram.counts) || [];
  const labels = counts.map((_, i) => `${edges[i]}–${edges[i + 1]}`);
  // Buckets at or past max_length hold the rows that will be cut.
  const colors = counts.map((_, i) => (edges[i + 1] > info.max_length ? '#dc2626' : '#b4621a'));
  if (histogram) histogram.destroy();
  histogram = new window.Chart($('#ft-histogram'), {
    type: 'bar',
    data: {labels, datasets: [{label: 'rows by token length', data: counts, backgroundColor: colors}]},
    options: {animation: false, maintainAspectRatio: false, plugins: {legend: {display: false}},
      scales: {x: {ticks: {font: {size: 9}}}, y: {ticks: {precision: 0, font: {size: 10}}}}},
  });
  const sample = info.sample || [];
  const keys = [...new Set(sample.flatMap(row => Object.keys(row)))];
  const cell = v => el('td', {}, typeof v === 'string' ? v : JSON.stringify(v));
  $('#ft-preview-sample').replaceChildren(el('table', {},
    el('thead', {}, el('tr', {}, ...keys.map(k => el('th', {}, k)))),
    el('tbody', {}, ...sample.map(row => el('tr', {}, ...keys.map(k => cell(row[k])))))));
}

function markMethodFit() {
  const file = selectedFile();
  const kind = previewInfo ? previewInfo.kind : file ? file.kind : null;
  for (const card of document.querySelectorAll('#ft-methods .method-card')) {
    const m = METHODS.find(x => x.type === card.dataset.method);
    card.classList.toggle('unfit', Boolean(kind) && m.kind !== kind);
    card.title = kind && m.kind !== kind ? `this file holds ${kind} rows; ${m.name} needs ${m.kind} rows` : '';
  }
}

function setMethod(type) {
  method = type;
  for (const card of document.querySelectorAll('#ft-methods .method-card')) {
    const on = card.dataset.method === type;
    card.classList.toggle('selected', on);
    card.querySelector('input').checked = on;
  }
  for (const label of document.querySelectorAll('#ft-hparams [data-methods]'))
    label.hidden = !label.dataset.methods.split(' ').includes(type);
  $('#ft-prefix-shared').disabled = type === 'supervised';
  updateEstimate();
}

function setPreset(id, apply = true) {
  preset = id;
  for (const card of document.querySelectorAll('#ft-presets .preset-card')) {
    const on = card.dataset.preset === id;
    card.classList.toggle('selected', on);
    card.querySelector('input').checked = on;
  }
  const p = PRESETS.find(x => x.id === id);
  if (apply && p.levers) {
    const cuda = $('#ft-device').value === 'cuda';
    $('#ft-segment').value = p.levers.segment;
    $('#ft-head-chunk').value = p.levers.headChunk;
    $('#ft-mlp-chunk').value = p.levers.mlpChunk;
    $('#ft-prefix-shared').checked = p.levers.prefixShared;
    $('#ft-offload').checked = p.levers.offload === 'cuda' ? cuda : p.levers.offload;
    $('#ft-offload-attention').checked = p.levers.offloadAttention === 'cuda' ? cuda : p.levers.offloadAttention;
  }
  updateEstimate();
}

function isPreference() {
  return method !== 'supervised';
}

// The levers as `brioche train` keys; defaults left out.
function levers() {
  const out = {};
  const segment = Number($('#ft-segment').value) || 0;
  if (segment > 0) out.segment_size = segment;
  const head = $('#ft-head-chunk').value.trim();
  if (head !== '' && Number(head) !== 4096) out.head_chunk_size = Number(head);
  const mlp = Number($('#ft-mlp-chunk').value) || 0;
  if (mlp > 0) out.mlp_chunk_size = mlp;
  if (isPreference() && $('#ft-prefix-shared').checked) out.prefix_shared = true;
  if ($('#ft-offload').checked) out.offload_boundaries = true;
  if ($('#ft-offload').checked && $('#ft-offload-attention').checked) out.offload_attention = true;
  if ($('#ft-device').value) out.device = $('#ft-device').value;
  return out;
}

function hyperparameters() {
  const hp = {};
  const number = (id, key, integer) => {
    const v = $(id).value.trim();
    if (v === '') return;
    hp[key] = integer ? parseInt(v, 10) : Number(v);
  };
  if (method === 'orpo') number('#ft-lambda', 'lambda');
  if (['dpo', 'ipo', 'simpo'].includes(method)) number('#ft-beta', 'beta');
  if (method === 'simpo') number('#ft-gamma', 'simpo_gamma');
  number('#ft-rank', 'rank', true);
  number('#ft-lr', 'learning_rate');
  number('#ft-steps', 'n_steps', true);
  number('#ft-batch', 'batch_size', true);
  number('#ft-max-length', 'max_length', true);
  number('#ft-eval-steps', 'steps_per_eval', true);
  return {...hp, ...levers()};
}

async function updateEstimate() {
  const box = $('#ft-estimate');
  const base = baseModel();
  if (!base) {
    box.textContent = '';
    return;
  }
  const seq = ++estimateSeq;
  const plan = {
    model: base.id, preference: isPreference(), levers: levers(),
    rank: $('#ft-rank').value.trim() === '' ? undefined : parseInt($('#ft-rank').value, 10),
    batch: Number($('#ft-batch').value) || 1, maxLength: Number($('#ft-max-length').value) || 2048,
    steps: Number($('#ft-steps').value) || 0, meanLength: previewInfo && previewInfo.token_lengths ? previewInfo.token_lengths.mean : null,
  };
  const jobs = (await listJobs().catch(() => [])) || [];
  const e = await estimate(plan, jobs).catch(() => null);
  if (seq !== estimateSeq || !e) return;
  const lines = [el('div', {}, `About ${Math.round(e.tokensPerStep).toLocaleString()} tokens a step`,
    plan.meanLength ? ` (mean row ${formatNumber(plan.meanLength, 3)} tokens, cut at ${plan.maxLength})` : ` (rows up to ${plan.maxLength} tokens)`,
    `, ${plan.steps} steps.`)];
  if (e.reference) {
    lines.push(el('div', {}, 'Time: ', el('strong', {}, e.seconds !== null ? `≈ ${formatSeconds(e.seconds)}` : 'not measured yet'),
      ` at the speed ${e.reference.id} trained with these levers.`));
    let memory;
    if (e.exact && e.estimatedBytes) {
      memory = [el('strong', {}, `≤ ${formatBytes(e.estimatedBytes)}`), ` (the server's bound for ${e.reference.id}, same shape)`,
        e.peakBytes ? `; it peaked at ${formatBytes(e.peakBytes)}` : ''];
    } else if (e.estimatedBytes) {
      memory = [el('strong', {}, `≤ ${formatBytes(e.estimatedBytes)}`),
        ` (the server's bounds for ${e.fittedFrom.join(', ')}, other shapes, drawn through this one)`];
    } else {
      memory = 'the server computes its bound when the job is created (no earlier job with these levers and rank had this batch × max length).';
    }
    lines.push(el('div', {}, 'Memory: ', memory));
  } else {
    lines.push(el('div', {class: 'muted'}, 'No job has run with these levers on this server yet, so there is no measured speed. ' +
      'The server computes a memory bound when the job is created (shown on the job) and refuses a job over its budget.'));
  }
  box.replaceChildren(...lines);
  box.dataset.ready = 'true';
}

async function start() {
  const base = baseModel();
  const file = selectedFile();
  if (!base || !file) {
    $('#ft-start-note').textContent = !base ? 'not connected to a server' : 'upload or pick a training file first';
    return;
  }
  const body = {model: base.id, training_file: file.id, method: {type: method, [method]: {hyperparameters: hyperparameters()}}};
  const validation = $('#ft-validation-file').value;
  if (validation) body.validation_file = validation;
  const suffix = $('#ft-suffix').value.trim();
  if (suffix) body.suffix = suffix;
  const seed = $('#ft-seed').value.trim();
  if (seed !== '') body.seed = parseInt(seed, 10);
  $('#ft-start').disabled = true;
  const job = await guarded('Starting the job (POST /v1/fine_tuning/jobs)', () => post('v1/fine_tuning/jobs', body));
  $('#ft-start').disabled = false;
  if (!job) return;
  $('#ft-start-note').textContent = `${job.id}: ${job.status}${job.estimated_memory_bytes ? `, memory bound ${formatBytes(job.estimated_memory_bytes)}` : ''}`;
  openTab('jobs', {job: job.id});
}

// Adapters: every LoRA adapter the server serves (GET /v1/models lists them
// with `parent` = the base and `lora_rank`), the job that trained it and its
// metrics; load and unload at run time (POST /v1/load_lora_adapter and
// /v1/unload_lora_adapter, vLLM's shapes: the server needs
// --allow-runtime-lora and --lora-dir).
import {post} from './api.js';
import {$, el, guarded, formatNumber} from './ui.js';
import {adapters, refreshModels, openTab} from './state.js';
import {listJobs, jobMetrics, TERMINAL, METHOD_NAMES, methodOf} from './jobs_client.js';

const UNLOADED_STORAGE = 'brioche.unloadedAdapters';  // name -> path, to load them again
const metricsCache = new Map();  // finished job id -> metrics response

function unloaded() {
  try {
    return JSON.parse(localStorage.getItem(UNLOADED_STORAGE) || '{}');
  } catch (_) {
    return {};
  }
}

function setUnloaded(map) {
  localStorage.setItem(UNLOADED_STORAGE, JSON.stringify(map));
}

export function init() {
  $('#adapters-refresh').addEventListener('click', () => refresh());
  $('#adapter-load-form').addEventListener('submit', async e => {
    e.preventDefault();
    const name = $('#adapter-load-name').value.trim();
    const path = $('#adapter-load-path').value.trim() || name;
    if (await load(name, path)) {
      $('#adapter-load-name').value = '';
      $('#adapter-load-path').value = '';
    }
  });
}

export function show() {
  refresh();
}

async function load(name, path) {
  const done = await guarded(`Loading adapter '${name}' from ${path}`,
    () => post('v1/load_lora_adapter', {lora_name: name, lora_path: path}));
  if (!done) return false;
  const map = unloaded();
  delete map[name];
  setUnloaded(map);
  await refresh();
  return true;
}

async function unload(name) {
  const done = await guarded(`Unloading adapter '${name}'`, () => post('v1/unload_lora_adapter', {lora_name: name}));
  if (!done) return;
  const map = unloaded();
  map[name] = map[name] || name;
  setUnloaded(map);
  await refresh();
}

// The job that trained `id` (its fine_tuned_model or one of its served
// checkpoints), and the checkpoint step when it is one.
function trainedBy(id, jobs) {
  for (const job of jobs) {
    if (job.fine_tuned_model === id) return {job, step: null};
    if ((job.served_models || []).includes(id)) {
      const m = /:ckpt-step-(\d+)$/.exec(id);
      return {job, step: m ? Number(m[1]) : null};
    }
  }
  return null;
}

async function metricsOf(job) {
  if (metricsCache.has(job.id)) return metricsCache.get(job.id);
  const metrics = await jobMetrics(job.id);
  if (TERMINAL.has(job.status)) metricsCache.set(job.id, metrics);
  return metrics;
}

// A one-line summary: the eval row at the checkpoint's step, or the last
// eval (else the last step) of the run.
function summary(metrics, step) {
  const rows = metrics.data || [];
  const evals = rows.filter(r => r.kind === 'eval');
  let row = step !== null ? evals.find(r => r.step === step) : evals[evals.length - 1];
  if (!row) row = [...rows].reverse().find(r => r.kind === 'step' && (step === null || r.step === step));
  if (!row) return '–';
  const parts = [`step ${row.step}`];
  const add = (label, key) => {
    if (typeof row[key] === 'number') parts.push(`${label} ${formatNumber(row[key], 3)}`);
  };
  add(row.kind === 'eval' ? 'eval loss' : 'loss', 'loss');
  add('margin', 'margin');
  add('accuracy', 'accuracy');
  if (metrics.best_margin_step !== null && metrics.best_margin_step !== undefined)
    parts.push(`best margin at step ${metrics.best_margin_step}`);
  return parts.join(' · ');
}

export async function refresh() {
  await guarded('Reading the served models (GET /v1/models)', refreshModels);
  const jobs = (await guarded('Reading the fine-tuning jobs', listJobs)) || [];
  const tbody = $('#adapters-table tbody');
  const served = adapters();
  const rows = [];
  for (const a of served) {
    const origin = trainedBy(a.id, jobs);
    const metricsCell = el('td', {class: 'metrics'}, origin ? '…' : '–');
    rows.push(el('tr', {dataset: {adapter: a.id}},
      el('td', {}, el('code', {}, a.id)),
      el('td', {}, a.parent),
      el('td', {}, String(a.lora_rank)),
      el('td', {}, origin ? el('a', {href: '#jobs', onclick: e => {
        e.preventDefault();
        openTab('jobs', {job: origin.job.id});
      }}, `${METHOD_NAMES[methodOf(origin.job)] || methodOf(origin.job)} · ${origin.job.id}`) : 'loaded from disk'),
      metricsCell,
      el('td', {class: 'actions'},
        el('button', {type: 'button', class: 'primary small', onclick: () => openTab('playground', {models: [a.id]})}, 'Try'),
        el('button', {type: 'button', class: 'secondary small', onclick: () => unload(a.id)}, 'Unload'))));
    if (origin) {
      metricsOf(origin.job).then(m => {
        metricsCell.textContent = summary(m, origin.step);
      }).catch(() => {
        metricsCell.textContent = '–';
      });
    }
  }
  const servedIds = new Set(served.map(a => a.id));
  for (const [name, path] of Object.entries(unloaded())) {
    if (servedIds.has(name)) continue;
    rows.push(el('tr', {class: 'unloaded', dataset: {adapter: name}},
      el('td', {}, el('code', {}, name)), el('td', {}, '–'), el('td', {}, '–'), el('td', {}, 'unloaded'),
      el('td', {class: 'muted'}, `path ${path}`),
      el('td', {class: 'actions'},
        el('button', {type: 'button', class: 'secondary small', onclick: () => load(name, path)}, 'Load again'),
        el('button', {type: 'button', class: 'secondary small', onclick: () => {
          const map = unloaded();
          delete map[name];
          setUnloaded(map);
          refresh();
        }}, 'Forget'))));
  }
  tbody.replaceChildren(...rows);
  $('#adapters-empty').hidden = rows.length > 0;
}

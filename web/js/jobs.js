// Jobs: every fine-tuning job with its status; the selected job's live
// charts and log from its event stream (GET .../events?stream=true: every
// event oldest first, then new ones as they happen, [DONE] once the job is
// neither queued nor running), and cancel / pause / resume.
import {get, post, stream} from './api.js';
import {$, el, guarded, showError, formatBytes, formatTime} from './ui.js';
import {refreshModels, openTab} from './state.js';
import {listJobs, jobMetrics, TERMINAL, METHOD_NAMES, methodOf} from './jobs_client.js';
import {JobCharts} from './charts.js';

const LIST_POLL_MS = 3000;
const MAX_LOG_LINES = 2000;

let charts = null;
let current = null;       // the selected job object
let eventsAbort = null;   // the selected job's event stream
let lastEventId = '';
let metricsPending = null;
let listTimer = null;
// Job states come from several requests at once (the list, GET job after an
// event); their answers may arrive out of order. Each request takes a number
// when it is sent, and only an answer newer than the one shown is drawn.
let stateSeq = 0;
let shownSeq = 0;

export function init() {
  charts = new JobCharts($('#job-charts'));
  $('#jobs-refresh').addEventListener('click', () => refreshList());
  $('#job-cancel').addEventListener('click', () => act('cancel'));
  $('#job-pause').addEventListener('click', () => act('pause'));
  $('#job-resume').addEventListener('click', () => act('resume'));
  $('#job-try').addEventListener('click', async () => {
    await guarded('Reading the served models', refreshModels);
    openTab('playground', {models: current.served_models && current.served_models.length ? current.served_models
      : [current.fine_tuned_model]});
  });
}

// arg: {job: id} selects that job.
export function show(arg) {
  refreshList();
  if (!listTimer) listTimer = setInterval(() => { if (!$('#tab-jobs').hidden) refreshList(); }, LIST_POLL_MS);
  if (arg && arg.job) select(arg.job);
}

export function refresh() {
  refreshList();
  if (current) select(current.id);
}

function progressText(job) {
  return job.total_steps ? `${job.step || 0}/${job.total_steps}` : (job.step ? String(job.step) : '–');
}

async function refreshList() {
  const seq = ++stateSeq;
  const jobs = await guarded('Reading the fine-tuning jobs (GET /v1/fine_tuning/jobs)', listJobs);
  if (!jobs) return;
  $('#jobs-table tbody').replaceChildren(...jobs.map(job => el('tr',
    {class: current && current.id === job.id ? 'selected' : null, dataset: {job: job.id, status: job.status}, onclick: () => select(job.id)},
    el('td', {}, el('code', {}, job.id), el('div', {class: 'muted'}, [job.suffix, formatTime(job.created_at)].filter(Boolean).join(' · '))),
    el('td', {}, METHOD_NAMES[methodOf(job)] || methodOf(job)),
    el('td', {class: 'status'}, el('span', {class: `badge ${job.status}`}, job.status)),
    el('td', {class: 'progress-cell'}, progressText(job)))));
  $('#jobs-empty').hidden = jobs.length > 0;
  // The selected job's status comes with the list too (a queued job starting, a cancel elsewhere).
  if (current) {
    const fresh = jobs.find(j => j.id === current.id);
    if (fresh && seq > shownSeq && (fresh.status !== current.status || fresh.step !== current.step)) {
      shownSeq = seq;
      renderJob(fresh);
    }
    if (!eventsAbort && lastEventId) follow({catchUp: true});
  }
}

async function select(id) {
  if (eventsAbort) eventsAbort.abort();
  eventsAbort = null;
  charts.clear();
  lastEventId = '';
  $('#job-log').replaceChildren();
  const seq = ++stateSeq;
  const job = await guarded(`Reading job ${id}`, () => get(`v1/fine_tuning/jobs/${encodeURIComponent(id)}`));
  if (!job) return;
  shownSeq = seq;
  renderJob(job);
  for (const tr of document.querySelectorAll('#jobs-table tbody tr')) tr.classList.toggle('selected', tr.dataset.job === id);
  await loadMetrics();
  follow();
}

function renderJob(job) {
  const wasLive = current && current.id === job.id && !TERMINAL.has(current.status);
  current = job;
  // Its row in the list shows the same state.
  const row = document.querySelector(`#jobs-table tbody tr[data-job="${job.id}"]`);
  if (row) {
    row.dataset.status = job.status;
    row.querySelector('td.status').replaceChildren(el('span', {class: `badge ${job.status}`}, job.status));
    row.querySelector('td.progress-cell').textContent = progressText(job);
  }
  $('#job-detail').hidden = false;
  $('#job-detail').dataset.job = job.id;
  $('#job-detail').dataset.status = job.status;
  $('#job-title').textContent = `${METHOD_NAMES[methodOf(job)] || methodOf(job)} · ${job.id}`;
  const badge = $('#job-status');
  badge.textContent = job.status;
  badge.className = `badge ${job.status}`;
  // A run reported by `brioche train --report-to` has no training file on the
  // server; it can be cancelled, not paused or resumed here (docs/jobs-api.md).
  const reported = !job.training_file;
  $('#job-cancel').disabled = !['queued', 'running', 'paused', 'interrupted'].includes(job.status);
  $('#job-pause').disabled = reported || job.status !== 'running';
  $('#job-resume').disabled = reported || !['paused', 'interrupted'].includes(job.status);
  $('#job-try').hidden = !(job.status === 'succeeded' && job.fine_tuned_model);
  $('#job-progress-bar').style.width = job.total_steps ? `${Math.min(100, 100 * (job.step || 0) / job.total_steps)}%` : '0';

  const hp = (job.method && job.method[methodOf(job)] && job.method[methodOf(job)].hyperparameters) || job.hyperparameters || {};
  const stat = (label, value) => el('span', {}, `${label} `, el('b', {}, value));
  $('#job-summary').replaceChildren(...[
    stat('model', job.model),
    stat('step', progressText(job)),
    reported ? stat('reported by', 'brioche train --report-to (its adapter lies where that run writes it)')
      : stat('training file', job.training_file),
    job.validation_file ? stat('validation file', job.validation_file) : null,
    stat('hyperparameters', Object.entries(hp).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ') || 'defaults'),
    job.estimated_memory_bytes ? stat('memory estimate', formatBytes(job.estimated_memory_bytes)) : null,
    job.trained_tokens ? stat('trained tokens', job.trained_tokens.toLocaleString()) : null,
    job.best_margin_step !== null && job.best_margin_step !== undefined ? stat('best margin step', String(job.best_margin_step)) : null,
    job.fine_tuned_model ? stat('adapter', job.fine_tuned_model) : null,
    job.served_models && job.served_models.length > 1 ? stat('also served', job.served_models.filter(m => m !== job.fine_tuned_model).join(', ')) : null,
    job.finished_at ? stat('finished', formatTime(job.finished_at)) : null,
    job.error ? el('span', {class: 'warn'}, `error${job.error.code ? ` (${job.error.code})` : ''}: ${job.error.message}`) : null,
  ].filter(Boolean));
  // A job that ends serves its adapter: the other tabs should list it.
  if (wasLive && TERMINAL.has(job.status)) refreshModels().catch(() => {});
  // A resumed job streams again.
  if (!eventsAbort && (job.status === 'queued' || job.status === 'running')) follow();
}

// Metric rows after the last step seen; the last step again, since its eval
// row may come after its step row.
async function loadMetrics() {
  if (!current) return;
  const id = current.id;
  const last = charts.lastStep();
  const metrics = await guarded(`Reading the metrics of ${id}`, () => jobMetrics(id, last > 0 ? last - 1 : undefined));
  if (!metrics || !current || current.id !== id) return;
  charts.addRows(metrics.data || [], metrics.best_margin_step);
}

// At most one metrics request in flight; events that arrive meanwhile ask for one more.
function scheduleMetrics() {
  if (metricsPending) {
    metricsPending.again = true;
    return;
  }
  metricsPending = {again: false};
  setTimeout(async () => {
    await loadMetrics();
    const again = metricsPending.again;
    metricsPending = null;
    if (again) scheduleMetrics();
  }, 200);
}

function logEvent(event) {
  const log = $('#job-log');
  const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.append(el('div', {class: event.level || 'info', dataset: {type: event.type}},
    el('span', {class: 'time'}, new Date(event.created_at * 1000).toLocaleTimeString()), event.message));
  while (log.childElementCount > MAX_LOG_LINES) log.firstChild.remove();
  if (atBottom) log.scrollTop = log.scrollHeight;
}

// Streams the selected job's events after the last one shown. The stream
// ends once the job is neither queued nor running, but a stopped job still
// gets events (a paused trainer's checkpoint, a cancelled one's exit), so
// each list poll catches up on a stopped job (catchUp: the stream answers
// what is new and ends at once).
async function follow({catchUp = false} = {}) {
  if (!current || eventsAbort) return;
  const id = current.id;
  const abort = new AbortController();
  eventsAbort = abort;
  const after = lastEventId ? `&after=${encodeURIComponent(lastEventId)}` : '';
  let received = 0;
  try {
    await stream(`v1/fine_tuning/jobs/${encodeURIComponent(id)}/events?stream=true${after}`, {signal: abort.signal, onData: event => {
      if (abort.signal.aborted) return;  // events already read when another job was selected
      received++;
      lastEventId = event.id;
      logEvent(event);
      if (event.type === 'metrics') scheduleMetrics();
      else refreshJob(id);
    }});
  } catch (e) {
    if (e.name !== 'AbortError' && !catchUp) showError(`Following the events of ${id}`, e);
  }
  if (eventsAbort !== abort) return;  // another job was selected meanwhile
  eventsAbort = null;
  if (catchUp && received === 0) return;
  // The stream ended: the job stopped running. Its final state and metrics.
  await refreshJob(id);
  await loadMetrics();
  if (!catchUp) refreshList();
}

async function refreshJob(id) {
  const seq = ++stateSeq;
  const job = await guarded(`Reading job ${id}`, () => get(`v1/fine_tuning/jobs/${encodeURIComponent(id)}`));
  if (job && current && current.id === id && seq > shownSeq) {
    shownSeq = seq;
    renderJob(job);
  }
}

async function act(action) {
  if (!current) return;
  const id = current.id;
  const seq = ++stateSeq;
  const job = await guarded(`${action[0].toUpperCase()}${action.slice(1)} job ${id}`,
    () => post(`v1/fine_tuning/jobs/${encodeURIComponent(id)}/${action}`, {}));
  if (job && current && current.id === id && seq > shownSeq) {
    shownSeq = seq;
    renderJob(job);
  }
  refreshList();
}

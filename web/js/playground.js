// Playground: one prompt to the base and any adapters side by side, each
// streamed (POST /v1/chat/completions, stream=true) with the same system
// prompt, sampling settings and structured output. Each column keeps its
// own conversation, so a follow-up goes to every model with its own history.
import {stream} from './api.js';
import {$, el, formatNumber} from './ui.js';
import {allModels, onModels, baseModel} from './state.js';

const selected = new Set();   // model ids with a column
const columns = new Map();    // id -> {root, messages: [], log, meta}
let abort = null;

export function init() {
  $('#pg-form').addEventListener('submit', e => {
    e.preventDefault();
    send();
  });
  $('#pg-input').addEventListener('keydown', e => {
    if (e.key === 'Enter' && !e.shiftKey) {
      e.preventDefault();
      send();
    }
  });
  $('#pg-stop').addEventListener('click', () => abort && abort.abort());
  $('#pg-clear').addEventListener('click', () => {
    for (const column of columns.values()) {
      column.messages = [];
      column.log.replaceChildren();
      column.meta.textContent = '';
    }
  });
  $('#pg-format').addEventListener('change', () => {
    $('#pg-schema-box').hidden = $('#pg-format').value !== 'json_schema';
  });
  onModels(renderModelList);
}

// arg: {models: [ids]} selects those models (the base stays selected).
export function show(arg) {
  if (arg && arg.models) {
    for (const id of arg.models) selected.add(id);
    renderModelList();
  }
}

function renderModelList() {
  const models = allModels();
  const ids = new Set(models.map(m => m.id));
  for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
  const base = baseModel();
  if (selected.size === 0 && base) selected.add(base.id);
  $('#pg-model-list').replaceChildren(...models.map(m => el('label', {class: 'check model-choice'},
    el('input', {type: 'checkbox', value: m.id, checked: selected.has(m.id), onchange: e => {
      if (e.target.checked) selected.add(m.id);
      else selected.delete(m.id);
      renderColumns();
    }}),
    m.parent ? `${m.id} (rank ${m.lora_rank})` : `${m.id} (base)`)));
  renderColumns();
}

function renderColumns() {
  const models = allModels();
  for (const [id, column] of columns) {
    if (!selected.has(id)) {
      column.root.remove();
      columns.delete(id);
    }
  }
  const box = $('#pg-columns');
  for (const m of models) {
    if (!selected.has(m.id) || columns.has(m.id)) continue;
    const log = el('div', {class: 'pg-log'});
    const meta = el('div', {class: 'pg-meta muted'});
    const root = el('div', {class: 'pg-column', dataset: {model: m.id, state: 'idle'}},
      el('h3', {}, m.id, ' ', el('span', {class: 'badge'}, m.parent ? `adapter · rank ${m.lora_rank}` : 'base')), log, meta);
    columns.set(m.id, {root, log, meta, messages: []});
  }
  // Keep the /v1/models order: base first, then the adapters.
  box.replaceChildren(...models.filter(m => columns.has(m.id)).map(m => columns.get(m.id).root));
}

// The sampling settings and structured output every column's request shares.
function sharedRequest() {
  const body = {stream: true, stream_options: {include_usage: true}};
  const number = (id, name) => {
    const v = $(id).value.trim();
    if (v !== '') body[name] = Number(v);
  };
  number('#pg-temperature', 'temperature');
  number('#pg-top-p', 'top_p');
  number('#pg-max-tokens', 'max_tokens');
  number('#pg-seed', 'seed');
  const format = $('#pg-format').value;
  if (format === 'json_object') body.response_format = {type: 'json_object'};
  if (format === 'json_schema') {
    let schema;
    try {
      schema = JSON.parse($('#pg-schema').value);
    } catch (e) {
      throw Object.assign(new Error(`the JSON schema does not parse: ${e.message}`), {status: 0});
    }
    body.response_format = {type: 'json_schema', json_schema: {name: 'playground', schema, strict: true}};
  }
  return body;
}

function send() {
  const text = $('#pg-input').value.trim();
  if (!text || abort) return;
  let shared;
  try {
    shared = sharedRequest();
  } catch (e) {
    for (const column of columns.values()) column.meta.textContent = e.message;
    return;
  }
  $('#pg-input').value = '';
  const system = $('#pg-system').value.trim();
  abort = new AbortController();
  $('#pg-send').disabled = true;
  $('#pg-stop').disabled = false;
  const runs = [...columns.entries()].map(([id, column]) => {
    column.messages.push({role: 'user', content: text});
    column.log.append(el('div', {class: 'msg user'}, text));
    const messages = system ? [{role: 'system', content: system}, ...column.messages] : column.messages;
    return streamInto(column, {...shared, model: id, messages: [...messages]}, abort.signal);
  });
  Promise.allSettled(runs).then(() => {
    abort = null;
    $('#pg-send').disabled = false;
    $('#pg-stop').disabled = true;
  });
}

async function streamInto(column, body, signal) {
  const reasoning = el('div', {class: 'msg reasoning'});
  const answer = el('div', {class: 'msg assistant streaming'});
  column.log.append(reasoning, answer);
  column.root.dataset.state = 'streaming';
  column.meta.textContent = '';
  const started = performance.now();
  let first = 0, text = '', usage = null, finish = null;
  try {
    await stream('v1/chat/completions', {method: 'POST', json: body, signal, onData: chunk => {
      if (chunk.error) throw Object.assign(new Error(chunk.error.message), chunk.error);
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        const delta = choice.delta || {};
        if (!first && (delta.content || delta.reasoning_content)) first = performance.now() - started;
        if (delta.reasoning_content) reasoning.textContent += delta.reasoning_content;
        if (delta.content) {
          text += delta.content;
          answer.textContent = text;
        }
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }});
    column.messages.push({role: 'assistant', content: text});
    const seconds = (performance.now() - started) / 1000;
    const parts = [];
    if (usage) parts.push(`${usage.completion_tokens} tokens`, `${formatNumber(usage.completion_tokens / seconds, 3)} tok/s`);
    if (first) parts.push(`first token ${first.toFixed(0)} ms`);
    if (finish) parts.push(`finish: ${finish}`);
    if (body.response_format) {
      const value = parseJson(text);
      parts.push(value !== undefined ? 'valid JSON ✓' : 'not JSON ✗');
      // Shown indented; the model's own bytes stay in the history and the tooltip.
      if (value !== undefined) {
        answer.textContent = JSON.stringify(value, null, 2);
        answer.title = text;
      }
    }
    column.meta.textContent = parts.join(' · ');
    column.root.dataset.state = 'done';
  } catch (e) {
    if (text) column.messages.push({role: 'assistant', content: text});
    else column.messages.pop();  // the question got no answer: ask again later
    answer.classList.add('error');
    const status = e.status ? `${e.status} ${e.type || ''} ${e.code || ''}`.trim() + ': ' : '';
    answer.textContent = e.name === 'AbortError' ? (text || '') + ' [stopped]' : status + e.message;
    column.root.dataset.state = e.name === 'AbortError' ? 'stopped' : 'error';
  } finally {
    answer.classList.remove('streaming');
    if (!reasoning.textContent) reasoning.remove();
  }
}

// The parsed value, or undefined when `text` is not JSON.
function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch (_) {
    return undefined;
  }
}

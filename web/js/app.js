// The workbench page: tabs (the URL's #hash picks one), the API key field,
// and each tab's module.
import {apiKey, setApiKey} from './api.js';
import {$, $$, guarded, clearErrors} from './ui.js';
import {refreshModels, baseModel, setTabSwitcher} from './state.js';
import * as finetune from './finetune.js';
import * as jobs from './jobs.js';
import * as adapters from './adapters.js';
import * as playground from './playground.js';

const tabs = {finetune, jobs, adapters, playground};
const DEFAULT_TAB = 'finetune';

function showTab(name, arg) {
  if (!tabs[name]) name = DEFAULT_TAB;
  for (const section of $$('main > section.tab')) section.hidden = section.id !== `tab-${name}`;
  for (const link of $$('#tabs a')) link.classList.toggle('active', link.dataset.tab === name);
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  tabs[name].show(arg);
}

async function connect() {
  const ok = await guarded('Reading the served models (GET /v1/models)', refreshModels);
  const base = baseModel();
  $('#server-model').textContent = ok && base ? `${base.id} · context ${base.max_model_len}` : 'not connected';
  $('#server-model').classList.toggle('bad', !ok);
  return ok;
}

function initApiKey() {
  const input = $('#api-key');
  input.value = apiKey();
  $('#api-key-form').addEventListener('submit', async e => {
    e.preventDefault();
    setApiKey(input.value.trim());
    clearErrors();
    if (await connect()) for (const tab of Object.values(tabs)) tab.refresh && tab.refresh();
  });
}

window.addEventListener('DOMContentLoaded', async () => {
  initApiKey();
  setTabSwitcher(showTab);
  for (const tab of Object.values(tabs)) tab.init();
  for (const link of $$('#tabs a')) {
    link.addEventListener('click', e => {
      e.preventDefault();
      showTab(link.dataset.tab);
    });
  }
  window.addEventListener('hashchange', () => showTab(location.hash.slice(1)));
  await connect();
  showTab(location.hash.slice(1) || DEFAULT_TAB);
  document.body.dataset.ready = 'true';  // the browser test waits for this
});

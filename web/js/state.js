// What the tabs share: the served models (base + adapters, from
// GET /v1/models) and switching tabs with an argument ("show this job",
// "try this adapter").
import {get} from './api.js';

const listeners = new Set();
let models = [];
let tabSwitcher = null;

// The base model (the one without a parent) and the adapters (parent = base).
export function baseModel() {
  return models.find(m => !m.parent) || null;
}

export function adapters() {
  return models.filter(m => m.parent);
}

export function allModels() {
  return models;
}

// Reloads /v1/models and tells every listener; throws ApiError.
export async function refreshModels() {
  const body = await get('v1/models');
  models = body.data || [];
  for (const f of listeners) f(models);
  return models;
}

export function onModels(f) {
  listeners.add(f);
}

export function setTabSwitcher(f) {
  tabSwitcher = f;
}

// openTab('playground', {models: ['ft:...']}), openTab('jobs', {job: 'ftjob-...'})
export function openTab(name, arg) {
  if (tabSwitcher) tabSwitcher(name, arg);
}

// Small DOM helpers shared by the tabs, and the page's error display.

// el('div', {class: 'x', onclick: f}, child, 'text', ...) -> Element
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name === 'dataset') Object.assign(node.dataset, value);
    else if (value === true) node.setAttribute(name, '');
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => [...root.querySelectorAll(selector)];

// Shows an error at the top of the page: what the page was doing, the HTTP
// status and OpenAI's type/code/param, and the server's message. Returns the banner.
export function showError(context, error) {
  const box = $('#errors');
  const parts = [];
  if (error && error.status) parts.push(String(error.status));
  if (error && error.type) parts.push(error.type);
  if (error && error.code) parts.push(error.code);
  const where = error && error.param ? ` (param: ${error.param})` : '';
  const banner = el('div', {class: 'error-banner', role: 'alert', dataset: {status: error && error.status ? error.status : ''}},
    el('strong', {}, context + ': '),
    parts.length ? el('code', {}, parts.join(' · ')) : null,
    ' ', el('span', {class: 'error-message'}, (error && error.message ? error.message : String(error)) + where),
    el('button', {class: 'dismiss', title: 'dismiss', onclick: () => banner.remove()}, '×'));
  box.append(banner);
  while (box.children.length > 5) box.firstChild.remove();
  return banner;
}

export function clearErrors() {
  $('#errors').replaceChildren();
}

// Runs `work` and shows any error it throws under `context`; returns its
// result or undefined.
export async function guarded(context, work) {
  try {
    return await work();
  } catch (e) {
    if (e && e.name === 'AbortError') return undefined;
    showError(context, e);
    return undefined;
  }
}

export function formatBytes(n) {
  if (n === null || n === undefined || !isFinite(n)) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(n >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

export function formatSeconds(s) {
  if (s === null || s === undefined || !isFinite(s)) return '–';
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
}

export function formatNumber(x, digits = 4) {
  if (x === null || x === undefined) return '–';
  if (typeof x !== 'number') return String(x);
  if (x !== 0 && (Math.abs(x) < 1e-3 || Math.abs(x) >= 1e5)) return x.toExponential(2);
  return String(Number(x.toPrecision(digits)));
}

export function formatTime(unixSeconds) {
  if (!unixSeconds) return '–';
  return new Date(unixSeconds * 1000).toLocaleString(undefined, {dateStyle: 'short', timeStyle: 'short'});
}

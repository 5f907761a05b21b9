// Every call the page makes to the server: JSON requests with the API key
// as a Bearer token, errors in OpenAI's shape turned into ApiError, and
// Server-Sent Events read from a fetch body (EventSource cannot send an
// Authorization header).

const KEY_STORAGE = 'brioche.apiKey';

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || '';
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

// An error answer: {"error": {"message", "type", "param", "code"}} and its HTTP status.
export class ApiError extends Error {
  constructor(status, error, path) {
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.type = error.type || null;
    this.param = error.param || null;
    this.code = error.code || null;
    this.path = path;
  }
}

function headers(extra = {}) {
  const h = {...extra};
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

// The error of a failed response; a body that is not OpenAI's shape still
// yields an ApiError that says what came back.
async function errorOf(res, path) {
  const text = await res.text();
  try {
    const body = JSON.parse(text);
    if (body && body.error) return new ApiError(res.status, body.error, path);
  } catch (_) { /* not JSON */ }
  return new ApiError(res.status, {message: `${res.status} ${res.statusText}: ${text.slice(0, 300)}`}, path);
}

// request('v1/models') -> parsed JSON; throws ApiError for any non-2xx.
// `json` sends a JSON body; `form` a FormData (multipart, the browser sets the boundary).
export async function request(path, {method = 'GET', json, form, signal} = {}) {
  const init = {method, signal, headers: headers()};
  if (json !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form;
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await errorOf(res, path);
  const type = res.headers.get('Content-Type') || '';
  return type.includes('json') ? res.json() : res.text();
}

export const get = (path, opts) => request(path, {...opts, method: 'GET'});
export const post = (path, json, opts) => request(path, {...opts, method: 'POST', json});
export const del = (path, opts) => request(path, {...opts, method: 'DELETE'});

// Reads an SSE response: calls onData(parsed JSON) for every `data:` event
// until `data: [DONE]` or the end of the body. Comment lines (": keep-alive")
// are skipped. Throws ApiError when the server answers an error instead of
// a stream. Returns when the stream ends; abort with `signal`.
export async function stream(path, {method = 'GET', json, signal, onData}) {
  const init = {method, signal, headers: headers({Accept: 'text/event-stream'})};
  if (json !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(json);
  }
  const res = await fetch(path, init);
  if (!res.ok) throw await errorOf(res, path);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, {stream: true}).replace(/\r\n/g, '\n');
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      // An event's data is its `data:` lines joined by newlines (the SSE spec).
      const data = block.split('\n').filter(l => l.startsWith('data:')).map(l => l.slice(l[5] === ' ' ? 6 : 5)).join('\n');
      if (!data) continue;
      if (data === '[DONE]') {
        reader.cancel().catch(() => {});
        return;
      }
      onData(JSON.parse(data));
    }
  }
}

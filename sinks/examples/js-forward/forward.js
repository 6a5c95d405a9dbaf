// An Ankusa sink in JavaScript: forwards hooks to an HTTP endpoint, only
// those whose JSON `type` is listed in `types` (all of them if unset).
//
// Build:   npm install && npm run build      (→ forward.wasm)
// Options: {"url": "https://api.example.com/events", "types": ["invoice.paid"]}

import { log } from 'ankusa:sink/log@0.1.3';
import { handle } from 'wasi:http/outgoing-handler@0.2.12';
import { Fields, OutgoingBody, OutgoingRequest } from 'wasi:http/types@0.2.12';

const KNOWN_OPTIONS = new Set(['url', 'types']);
const PERMANENT = new Set([400, 401, 403, 404, 410, 413, 422]);
const WRITE_CHUNK = 4096;
const encoder = new TextEncoder();

let settings = null;

function configError(field, message) {
  return { field, message };
}

function failure(tag, reason, val) {
  const klass = val === undefined ? { tag } : { tag, val };
  return { class: klass, reason: String(reason).slice(0, 1024) };
}

function eventType(body) {
  try {
    const event = JSON.parse(new TextDecoder().decode(body));
    return event && typeof event === 'object' ? event.type : undefined;
  } catch {
    return undefined;
  }
}

function send(url, hook) {
  const headers = Fields.fromList([
    ['content-type', encoder.encode(hook.contentType ?? 'application/octet-stream')],
    ['content-length', encoder.encode(String(hook.body.length))],
    ['x-ankusa-id', encoder.encode(hook.id)],
    ['idempotency-key', encoder.encode(hook.idempotencyKey)],
  ]);
  const request = new OutgoingRequest(headers);
  request.setMethod({ tag: 'post' });
  request.setScheme({ tag: url.protocol === 'https:' ? 'HTTPS' : 'HTTP' });
  request.setAuthority(url.host);
  request.setPathWithQuery(url.pathname + url.search);
  const body = request.body();
  const pending = handle(request, undefined);
  const stream = body.write();
  for (let at = 0; at < hook.body.length; at += WRITE_CHUNK) {
    stream.blockingWriteAndFlush(hook.body.subarray(at, at + WRITE_CHUNK));
  }
  stream[Symbol.dispose]();
  OutgoingBody.finish(body, undefined);
  pending.subscribe().block();
  const outcome = pending.get();
  if (outcome === undefined || outcome.tag === 'err') {
    throw failure('transient', 'no response');
  }
  if (outcome.val.tag === 'err') {
    const code = outcome.val.val;
    throw failure(code.tag === 'HTTP-request-denied' ? 'permanent' : 'transient', `request failed: ${code.tag}`);
  }
  return outcome.val.val.status();
}

export const sink = {
  configure(json) {
    let options;
    try {
      options = JSON.parse(json || '{}');
    } catch (e) {
      throw configError(undefined, `options are not JSON: ${e.message}`);
    }
    for (const key of Object.keys(options)) {
      if (!KNOWN_OPTIONS.has(key)) throw configError(key, `unknown option \`${key}\``);
    }
    let url;
    try {
      url = new URL(options.url);
    } catch {
      throw configError('url', 'must be an absolute http:// or https:// URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw configError('url', 'must be an absolute http:// or https:// URL');
    }
    const types = options.types;
    if (types !== undefined && !(Array.isArray(types) && types.every((t) => typeof t === 'string'))) {
      throw configError('types', 'must be a list of event type names');
    }
    settings = { url, types: types === undefined ? null : new Set(types) };
  },

  durable() {
    return true;
  },

  deliver(hook, attempt) {
    const type = eventType(hook.body);
    if (settings.types && !settings.types.has(type)) {
      log('debug', `skipped ${hook.id}: type ${type ?? '(none)'} is not forwarded`);
      return;
    }
    const status = send(settings.url, hook);
    if (status >= 200 && status < 300) return;
    if (PERMANENT.has(status)) throw failure('permanent', `destination answered ${status}`);
    throw failure('transient', `destination answered ${status} (attempt ${attempt})`);
  },
};

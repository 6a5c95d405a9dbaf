// {{name}}: an Ankusa sink. It logs one line per hook and, when the `url`
// option is set, POSTs the hook's body there.
//
// Options: {"url": "https://api.example.com/hooks"} (optional).

import { log } from 'ankusa:sink/log@{{wit_version}}';
import { send } from 'ankusa:sink/http-client@{{wit_version}}';

const KNOWN_OPTIONS = new Set(['url']);
const encoder = new TextEncoder();

let url = null;

function configError(field, message) {
  return { field, message };
}

function failure(tag, reason) {
  return { class: { tag }, reason: String(reason).slice(0, 1024) };
}

function describe(error) {
  const cause = error?.payload ?? error;
  return cause?.tag ? `${cause.tag}: ${cause.val}` : String(cause);
}

export const sink = {
  configure(json) {
    let options;
    try {
      options = JSON.parse(json || '{}');
    } catch (e) {
      throw configError(undefined, `options are not JSON: ${e.message}`);
    }
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw configError(undefined, 'options must be a JSON object');
    }
    for (const key of Object.keys(options)) {
      if (!KNOWN_OPTIONS.has(key)) throw configError(key, `unknown option \`${key}\``);
    }
    if (options.url !== undefined && !/^https?:\/\//.test(String(options.url))) {
      throw configError('url', 'must start with http:// or https://');
    }
    url = options.url ?? null;
  },

  // A log line, or a POST's answer, is no durable copy of the hook.
  durable() {
    return false;
  },

  deliver(hook, attempt) {
    log('info', `${hook.source}: hook ${hook.id}, ${hook.body.length} bytes, attempt ${attempt}`);
    if (url === null) return;
    let response;
    try {
      response = send({
        method: 'POST',
        url,
        headers: [
          ['content-type', encoder.encode(hook.contentType ?? 'application/octet-stream')],
          ['idempotency-key', encoder.encode(hook.idempotencyKey)],
        ],
        body: hook.body,
      });
    } catch (e) {
      // Denied, connect, timeout...: worth another try (the host records
      // a denied destination under its own class).
      throw failure('transient', `${url}: ${describe(e)}`);
    }
    const status = response.status;
    if (status >= 200 && status < 300) return;
    if (status === 408 || status === 429 || status >= 500) throw failure('transient', `${url} answered ${status}`);
    throw failure('permanent', `${url} answered ${status}`);
  },
};

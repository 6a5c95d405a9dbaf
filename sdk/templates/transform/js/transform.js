// {{name}}: an Ankusa transform. It drops each hook whose body holds the
// text of the `drop_when` option, and tags every other with the header
// `x-transform: {{name}}`, its body unchanged.
//
// Options: {"drop_when": "ping"} (optional: without it, every hook is kept).

const KNOWN_OPTIONS = new Set(['drop_when']);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

let dropWhen = null;

function configError(field, message) {
  return { field, message };
}

export const transform = {
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
    const text = options.drop_when;
    if (text !== undefined && (typeof text !== 'string' || text === '')) {
      throw configError('drop_when', 'a text that is not empty');
    }
    dropWhen = text ?? null;
  },

  transform(hook) {
    if (dropWhen !== null && decoder.decode(hook.body).includes(dropWhen)) {
      return { tag: 'drop', val: `the body holds ${dropWhen}` };
    }
    return {
      tag: 'deliver',
      val: { body: undefined, contentType: undefined, setHeaders: [['x-transform', encoder.encode('{{name}}')]], removeHeaders: [] },
    };
  },
};

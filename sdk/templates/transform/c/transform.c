// {{name}}: an Ankusa transform. It drops each hook whose body holds the
// text of the `drop_when` option, and tags every other with the header
// `x-transform: {{name}}`, its body unchanged.
//
// Options: {"drop_when": "<text>"} (optional: without it, every hook is
// kept).
//
// `ankusa sink build` generates transform_world.h from ./wit into
// build/bindings. The host passes each export its arguments to own: free
// them when done.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transform_world.h"

// The text that drops a hook (NUL-terminated), or NULL to keep every one.
static char *drop_when = NULL;

static bool config_error(exports_ankusa_sink_transform_config_error_t *err, const char *field, const char *message) {
  err->field.is_some = field != NULL;
  if (field != NULL) transform_world_string_dup(&err->field.val, field);
  transform_world_string_dup(&err->message, message);
  return false;
}

// The options are `{}` or `{"drop_when": "<text without quotes>"}`. A real
// transform would use a JSON library; this reads exactly that shape.
bool exports_ankusa_sink_transform_configure(transform_world_string_t *options,
                                             exports_ankusa_sink_transform_config_error_t *err) {
  char *text = strndup((const char *)options->ptr, options->len);
  transform_world_string_free(options);
  if (text == NULL) return config_error(err, NULL, "out of memory");
  char value[1024];
  bool ok = true;
  if (sscanf(text, " { \"drop_when\" : \"%1023[^\"]\" }", value) == 1) {
    free(drop_when);
    drop_when = strdup(value);
  } else {
    char rest;
    if (sscanf(text, " { %c", &rest) != 1 || rest != '}') {
      ok = config_error(err, NULL, "the only option is `drop_when` (a string)");
    }
  }
  free(text);
  return ok;
}

static bool holds(const uint8_t *body, size_t len, const char *text) {
  size_t n = strlen(text);
  for (size_t i = 0; n > 0 && i + n <= len; i++) {
    if (memcmp(body + i, text, n) == 0) return true;
  }
  return false;
}

bool exports_ankusa_sink_transform_transform(exports_ankusa_sink_transform_hook_t *hook,
                                             exports_ankusa_sink_transform_verdict_t *ret,
                                             exports_ankusa_sink_transform_failure_t *err) {
  (void)err;
  bool drop = drop_when != NULL && holds(hook->body.ptr, hook->body.len, drop_when);
  exports_ankusa_sink_transform_hook_free(hook);
  if (drop) {
    char reason[1100];
    snprintf(reason, sizeof reason, "the body holds %s", drop_when);
    ret->tag = EXPORTS_ANKUSA_SINK_TRANSFORM_VERDICT_DROP;
    transform_world_string_dup(&ret->val.drop, reason);
    return true;
  }
  ret->tag = EXPORTS_ANKUSA_SINK_TRANSFORM_VERDICT_DELIVER;
  exports_ankusa_sink_transform_outgoing_t *out = &ret->val.deliver;
  memset(out, 0, sizeof *out);
  out->set_headers.len = 1;
  out->set_headers.ptr = calloc(1, sizeof *out->set_headers.ptr);
  transform_world_string_dup(&out->set_headers.ptr[0].f0, "x-transform");
  const char *tag = "{{name}}";
  out->set_headers.ptr[0].f1.len = strlen(tag);
  out->set_headers.ptr[0].f1.ptr = (uint8_t *)strdup(tag);
  return true;
}

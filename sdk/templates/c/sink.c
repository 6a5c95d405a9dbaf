// {{name}}: an Ankusa sink. It logs one line per hook and, when the `url`
// option is set, POSTs the hook's body there.
//
// Options: {"url": "https://api.example.com/hooks"} (optional).
//
// `ankusa sink build` generates sink_world.h from ./wit into build/bindings.
// The host passes each export its arguments to own: free them when done.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink_world.h"

// The configured URL (NUL-terminated), or NULL to only log.
static char *url = NULL;

static void set_string(sink_world_string_t *out, const char *text) {
  sink_world_string_dup(out, text);
}

static void log_line(ankusa_sink_log_level_t level, const char *text) {
  sink_world_string_t message;
  set_string(&message, text);
  ankusa_sink_log_log(level, &message);
  sink_world_string_free(&message);
}

static bool config_error(exports_ankusa_sink_sink_config_error_t *err, const char *field, const char *message) {
  err->field.is_some = field != NULL;
  if (field != NULL) set_string(&err->field.val, field);
  set_string(&err->message, message);
  return false;
}

static bool fail(exports_ankusa_sink_sink_failure_t *err, uint8_t class, const char *reason) {
  err->class_.tag = class;
  set_string(&err->reason, reason);
  return false;
}

static bool starts_with(const uint8_t *text, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && memcmp(text, prefix, n) == 0;
}

// The options are `{}` or `{"url": "<http or https URL>"}`. A real sink would
// use a JSON library; this reads exactly that shape and refuses the rest.
bool exports_ankusa_sink_sink_configure(sink_world_string_t *options, exports_ankusa_sink_sink_config_error_t *err) {
  char *text = strndup((const char *)options->ptr, options->len);
  sink_world_string_free(options);
  if (text == NULL) return config_error(err, NULL, "out of memory");
  char value[2048];
  bool ok = true;
  if (sscanf(text, " { \"url\" : \"%2047[^\"]\" }", value) == 1) {
    if (!starts_with((const uint8_t *)value, strlen(value), "http://") &&
        !starts_with((const uint8_t *)value, strlen(value), "https://")) {
      ok = config_error(err, "url", "must start with http:// or https://");
    } else {
      free(url);
      url = strdup(value);
    }
  } else {
    char rest;
    if (sscanf(text, " { %c", &rest) != 1 || rest != '}') {
      ok = config_error(err, NULL, "the only option is `url` (a string)");
    }
  }
  free(text);
  return ok;
}

// A log line, or a POST's answer, is no durable copy of the hook.
bool exports_ankusa_sink_sink_durable(void) {
  return false;
}

static bool post(const ankusa_sink_delivery_hook_t *hook, exports_ankusa_sink_sink_failure_t *err) {
  sink_world_tuple2_string_list_u8_t headers[2];
  const char *content_type = "application/octet-stream";
  char type_buffer[256];
  if (hook->content_type.is_some && hook->content_type.val.len < sizeof type_buffer) {
    memcpy(type_buffer, hook->content_type.val.ptr, hook->content_type.val.len);
    type_buffer[hook->content_type.val.len] = 0;
    content_type = type_buffer;
  }
  set_string(&headers[0].f0, "content-type");
  headers[0].f1.ptr = (uint8_t *)content_type;
  headers[0].f1.len = strlen(content_type);
  set_string(&headers[1].f0, "idempotency-key");
  headers[1].f1.ptr = hook->idempotency_key.ptr;
  headers[1].f1.len = hook->idempotency_key.len;

  ankusa_sink_http_client_request_t request = {0};
  set_string(&request.method, "POST");
  set_string(&request.url, url);
  request.headers.ptr = headers;
  request.headers.len = 2;
  request.body.ptr = hook->body.ptr;
  request.body.len = hook->body.len;

  ankusa_sink_http_client_response_t response;
  ankusa_sink_http_client_error_t error;
  bool sent = ankusa_sink_http_client_send(&request, &response, &error);
  sink_world_string_free(&request.method);
  sink_world_string_free(&request.url);
  sink_world_string_free(&headers[0].f0);
  sink_world_string_free(&headers[1].f0);

  char reason[512];
  if (!sent) {
    // Denied, connect, timeout...: worth another try (the host records a
    // denied destination under its own class).
    snprintf(reason, sizeof reason, "%s: %.*s", url, (int)error.val.denied.len, (const char *)error.val.denied.ptr);
    ankusa_sink_http_client_error_free(&error);
    return fail(err, ANKUSA_SINK_DELIVERY_ERROR_CLASS_TRANSIENT, reason);
  }
  uint16_t status = response.status;
  ankusa_sink_http_client_response_free(&response);
  if (status >= 200 && status < 300) return true;
  snprintf(reason, sizeof reason, "%s answered %u", url, status);
  if (status == 408 || status == 429 || status >= 500) {
    return fail(err, ANKUSA_SINK_DELIVERY_ERROR_CLASS_TRANSIENT, reason);
  }
  return fail(err, ANKUSA_SINK_DELIVERY_ERROR_CLASS_PERMANENT, reason);
}

bool exports_ankusa_sink_sink_deliver(exports_ankusa_sink_sink_hook_t *hook, uint32_t attempt,
                                      exports_ankusa_sink_sink_failure_t *err) {
  char line[512];
  snprintf(line, sizeof line, "%.*s: hook %.*s, %zu bytes, attempt %u", (int)hook->source.len,
           (const char *)hook->source.ptr, (int)hook->id.len, (const char *)hook->id.ptr, hook->body.len, attempt);
  log_line(ANKUSA_SINK_LOG_LEVEL_INFO, line);
  bool ok = url == NULL || post(hook, err);
  exports_ankusa_sink_sink_hook_free(hook);
  return ok;
}

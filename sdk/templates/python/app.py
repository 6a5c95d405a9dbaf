"""{{name}}: an Ankusa sink. It logs one line per hook and, when the `url`
option is set, POSTs the hook's body there.

Options: {"url": "https://api.example.com/hooks"} (optional).
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import http_client, log
from wit_world.imports.delivery import (
    ConfigError,
    ErrorClass_Permanent,
    ErrorClass_Transient,
    Failure,
    Hook,
)

KNOWN_OPTIONS = {"url"}
RETRYABLE = {408, 429}

# The host may make a new `Sink` object for each call: what `configure`
# parsed lives at module level (one module per instance).
SETTINGS = {}


def config_error(field, message):
    return Err(ConfigError(field=field, message=message))


def failure(class_, reason):
    return Err(Failure(class_=class_, reason=reason[:1024]))


class Sink(exports.Sink):
    def configure(self, options: str) -> None:
        try:
            opts = json.loads(options or "{}")
        except json.JSONDecodeError as e:
            raise config_error(None, f"options are not JSON: {e}")
        if not isinstance(opts, dict):
            raise config_error(None, "options must be a JSON object")
        for key in opts:
            if key not in KNOWN_OPTIONS:
                raise config_error(key, f"unknown option `{key}`")
        url = opts.get("url")
        if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise config_error("url", "must start with http:// or https://")
        SETTINGS["url"] = url

    def durable(self) -> bool:
        # A log line, or a POST's answer, is no durable copy of the hook.
        return False

    def deliver(self, hook: Hook, attempt: int) -> None:
        log.log(log.Level.INFO, f"{hook.source}: hook {hook.id}, {len(hook.body)} bytes, attempt {attempt}")
        url = SETTINGS.get("url")
        if url is None:
            return
        content_type = hook.content_type or "application/octet-stream"
        request = http_client.Request(
            method="POST",
            url=url,
            headers=[
                ("content-type", content_type.encode()),
                ("idempotency-key", hook.idempotency_key.encode()),
            ],
            body=bytes(hook.body),
            connect_timeout_ms=None,
            first_byte_timeout_ms=None,
            between_bytes_timeout_ms=None,
            max_response_bytes=None,
        )
        try:
            response = http_client.send(request)
        except Err as e:
            # Denied, connect, timeout...: worth another try (the host
            # records a denied destination under its own class).
            raise failure(ErrorClass_Transient(), f"{url}: {e.value}")
        status = response.status
        if 200 <= status < 300:
            return
        if status in RETRYABLE or status >= 500:
            raise failure(ErrorClass_Transient(), f"{url} answered {status}")
        raise failure(ErrorClass_Permanent(), f"{url} answered {status}")

"""A chat-notification sink in Python: posts a one-line summary of each hook
to an incoming-webhook URL (Slack, Mattermost, Discord-compatible).

Build:  componentize-py -d ../../../wit -w ankusa:sink/sink-world componentize app -o notify.wasm
Options: {"url": "https://hooks.slack.com/services/...", "template": "{source}: {type} ({id})"}
"""

import asyncio
import json
from urllib.parse import urlsplit

import poll_loop
from componentize_py_types import Err
from poll_loop import PollLoop
from wit_world import exports
from wit_world.imports import log
from wit_world.imports.delivery import (
    ConfigError,
    ErrorClass_Permanent,
    ErrorClass_RetryAfter,
    ErrorClass_Transient,
    Failure,
    Hook,
)
from wit_world.imports.types import (
    Fields,
    Method_Post,
    OutgoingBody,
    OutgoingRequest,
    Scheme_Http,
    Scheme_Https,
)

KNOWN_OPTIONS = {"url", "template"}
PERMANENT = {400, 401, 403, 404, 410, 413, 422}


# componentize-py may make a fresh `Sink` object for each call, so the
# configured state lives at module level (one module per instance).
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
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise config_error("url", "must be an http:// or https:// URL")
        template = opts.get("template", "{source}: {type} ({id})")
        try:
            template.format(source="", tenant="", id="", type="", attempt=0)
        except (KeyError, IndexError, ValueError) as e:
            raise config_error("template", f"bad placeholder: {e}")
        SETTINGS.update(url=urlsplit(url), template=template)

    def durable(self) -> bool:
        # A chat message is a notification, not a copy of the hook.
        return False

    def deliver(self, hook: Hook, attempt: int) -> None:
        event_type = "event"
        try:
            event = json.loads(bytes(hook.body))
            if isinstance(event, dict):
                event_type = str(event.get("type") or event.get("action") or event_type)
        except (ValueError, UnicodeDecodeError):
            pass
        text = SETTINGS["template"].format(
            source=hook.source, tenant=hook.tenant, id=hook.id, type=event_type, attempt=attempt
        )
        try:
            status = run(post(SETTINGS["url"], json.dumps({"text": text}).encode()))
        except Err as e:
            raise failure(ErrorClass_Transient(), f"request failed: {e.value}")
        if 200 <= status < 300:
            log.log(log.Level.DEBUG, f"notified: {text}")
            return
        if status in PERMANENT:
            raise failure(ErrorClass_Permanent(), f"chat endpoint answered {status}")
        if status == 429:
            raise failure(ErrorClass_RetryAfter(value=30_000), "chat endpoint is rate limiting")
        raise failure(ErrorClass_Transient(), f"chat endpoint answered {status}")


def run(coroutine):
    loop = PollLoop()
    asyncio.set_event_loop(loop)
    return loop.run_until_complete(coroutine)


async def post(url, body: bytes) -> int:
    headers = Fields.from_list(
        [("content-type", b"application/json"), ("content-length", str(len(body)).encode())]
    )
    request = OutgoingRequest(headers)
    request.set_method(Method_Post())
    request.set_scheme(Scheme_Https() if url.scheme == "https" else Scheme_Http())
    request.set_authority(url.netloc)
    path = url.path or "/"
    request.set_path_with_query(path + ("?" + url.query if url.query else ""))
    outgoing = request.body()
    pending = asyncio.ensure_future(poll_loop.send(request))
    sink = poll_loop.Sink(outgoing)
    await sink.send(body)
    sink.close()
    response = await pending
    status = response.status()
    stream = poll_loop.Stream(response.consume())
    while await stream.next() is not None:
        pass
    return status

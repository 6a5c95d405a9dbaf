"""{{name}}: an Ankusa transform. It drops each hook whose body holds the
text of the `drop_when` option, and tags every other with the header
`x-transform: {{name}}`, its body unchanged.

Options: {"drop_when": "ping"} (optional: without it, every hook is kept).
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.transform import Outgoing, Verdict_Deliver, Verdict_Drop
from wit_world.imports.delivery import ConfigError, Hook

KNOWN_OPTIONS = {"drop_when"}

# The host may make a new `Transform` object for each call: what
# `configure` parsed lives at module level (one module per instance).
SETTINGS = {}


def config_error(field, message):
    return Err(ConfigError(field=field, message=message))


class Transform(exports.Transform):
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
        text = opts.get("drop_when")
        if text is not None and not (isinstance(text, str) and text):
            raise config_error("drop_when", "a text that is not empty")
        SETTINGS["drop_when"] = text.encode() if text else None

    def transform(self, hook: Hook):
        text = SETTINGS.get("drop_when")
        if text is not None and text in bytes(hook.body):
            return Verdict_Drop(f"the body holds {text.decode()}")
        return Verdict_Deliver(
            Outgoing(
                body=None,
                content_type=None,
                set_headers=[("x-transform", b"{{name}}")],
                remove_headers=[],
            )
        )

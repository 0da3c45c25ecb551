"""Scripted replies for synthesis tests that plant a defect in the default scripted answers."""

from __future__ import annotations

import json
from collections.abc import Sequence

from personalign.llm.backends.scripted import default_responder
from personalign.llm.types import GenerateConfig
from personalign.types import Message


def leaky_request(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The default scripted reply, except that each session's request without the preference is
    the one with it: the preference leaks into the request, which must reject the persona."""
    text = default_responder(messages, config)
    if config.schema_name == "synth_session":
        data = json.loads(text)
        data["request_with_factor"] = data["request_with_factor_and_preference"]
        return json.dumps(data)
    return text

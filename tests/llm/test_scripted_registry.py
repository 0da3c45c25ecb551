"""The scripted backend's responder registry: answers for prompts the core does not know are
registered from above (synthesis registers ``synth_``), so the model layer imports nothing above it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from personalign.llm.backends import scripted
from personalign.llm.backends.scripted import default_responder, register_schema_responder
from personalign.llm.types import GenerateConfig
from personalign.types import Message

SCHEMA = {"type": "object"}


def _ask(name: str) -> str:
    return default_responder(
        [Message(role="user", content="hello")], GenerateConfig(json_schema=SCHEMA, schema_name=name)
    )


def test_registered_prefix_answers_its_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scripted, "_SCHEMA_RESPONDERS", {})

    def answer(messages: Sequence[Message], config: GenerateConfig) -> str:
        return json.dumps({"schema": config.schema_name, "user": messages[0].content})

    register_schema_responder("plugin_", answer)
    assert json.loads(_ask("plugin_step")) == {"schema": "plugin_step", "user": "hello"}


def test_longest_prefix_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scripted, "_SCHEMA_RESPONDERS", {})
    register_schema_responder("x_", lambda m, c: "short")
    register_schema_responder("x_long_", lambda m, c: "long")
    assert _ask("x_long_step") == "long"
    assert _ask("x_other") == "short"


def test_empty_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="prefix"):
        register_schema_responder("", lambda m, c: "")


def test_synthesis_registers_its_dry_run_answers() -> None:
    import personalign.synth  # noqa: F401  (importing the package registers the synth_ responder)

    assert scripted._schema_responder("synth_persona") is not None
    reply = json.loads(_ask("synth_persona"))
    assert isinstance(reply, dict) and reply

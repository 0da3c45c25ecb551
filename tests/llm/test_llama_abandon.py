"""A local-model call whose caller gave up (timeout, cancellation) while it waited for the model's
lock never generates: a thread cannot be stopped, and such a call used to run to the end anyway,
delaying every call queued behind it and holding the process open after a run had finished."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from personalign.llm.backends import llama_local
from personalign.llm.spec import parse_model_spec
from personalign.llm.types import GenerateConfig
from personalign.types import Message

MESSAGES = [Message(role="user", content="Hello")]


class _Llm:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 1},
        }


def _backend(monkeypatch: pytest.MonkeyPatch) -> tuple[llama_local.LlamaLocalBackend, Any]:
    llm = _Llm()
    model = SimpleNamespace(
        lock=threading.Lock(), llm=llm, prepare=lambda chat: (None, 0), context_prefix=None,
        stats=SimpleNamespace(calls=0, prompt_tokens=0, reused_tokens=0),
    )  # fmt: skip
    monkeypatch.setattr(llama_local, "resolve_model_path", lambda name: Path("model.gguf"))
    monkeypatch.setattr(llama_local, "load_model", lambda path, n_ctx: model)
    return llama_local.LlamaLocalBackend(parse_model_spec("local/smollm2")), model


def test_a_call_timed_out_waiting_for_the_model_never_generates(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, model = _backend(monkeypatch)

    async def main() -> None:
        model.lock.acquire()  # another role's call holds the model
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(backend.generate(MESSAGES, GenerateConfig(), timeout=1.0), 0.05)
        finally:
            model.lock.release()

    asyncio.run(main())  # returns once the executor's threads are done
    assert model.llm.calls == []


def test_a_call_not_given_up_still_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, model = _backend(monkeypatch)
    reply = asyncio.run(backend.generate(MESSAGES, GenerateConfig(), timeout=1.0))
    assert reply.text == "hi" and len(model.llm.calls) == 1

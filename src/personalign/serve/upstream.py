"""Upstream calls of the gateway through the core model layer: one answer, or a stream of pieces.

Streaming uses the backend's own ``stream`` (OpenAI-compatible servers: real upstream streaming).
A backend without one (scripted, local, Anthropic) is called once and its finished answer is sent
as a stream of word pieces, so clients see the same event shapes either way.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from personalign.errors import ConfigError
from personalign.llm import GenerateConfig, Model, ModelFactory, parse_model_spec
from personalign.llm.types import Completion, StreamChunk
from personalign.types import Message


@dataclass(frozen=True)
class Upstream:
    """One model the gateway serves, under the name clients put in ``model``."""

    name: str
    model: Model


def parse_upstreams(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``NAME=SPEC`` or ``SPEC`` (named after the spec's model) -> (name, spec) pairs."""
    pairs: list[tuple[str, str]] = []
    for text in specs:
        name, sep, spec = text.partition("=")
        if not sep or "/" in name:
            name, spec = parse_model_spec(text).model, text
        if any(n == name for n, _ in pairs):
            raise ConfigError(f"upstream name {name!r} given twice")
        pairs.append((name, spec))
    if not pairs:
        raise ConfigError("give at least one --upstream model spec")
    return pairs


class Upstreams:
    """The gateway's upstream models by name; the first is the default."""

    def __init__(self, factory: ModelFactory, specs: Sequence[str]) -> None:
        self.factory = factory
        self.items = [Upstream(name, factory.get(spec)) for name, spec in parse_upstreams(specs)]

    def get(self, name: str | None) -> Upstream | None:
        if not name:
            return self.items[0]
        return next((u for u in self.items if u.name == name), None)

    async def aclose(self) -> None:
        await self.factory.aclose()


async def complete(model: Model, messages: Sequence[Message], config: GenerateConfig) -> Completion:
    return await model.complete(messages, config)


_PIECE = re.compile(r"\S+\s*|\s+")


async def stream(
    model: Model, messages: Sequence[Message], config: GenerateConfig
) -> AsyncIterator[list[StreamChunk]]:
    """The answer in pieces, grouped by arrival (each group can go to the client in one write),
    usage recorded with the model's tracker; `ModelCallError` on failure."""
    backend = model.backend
    batches = getattr(backend, "stream_batches", None)
    single = getattr(backend, "stream", None)
    if batches is None and single is None:
        completion = await model.complete(messages, config)
        pieces = [StreamChunk(text=piece) for piece in _PIECE.findall(completion.text)]
        last = StreamChunk(
            finish_reason=completion.finish_reason,
            usage=completion.usage,
            raw_finish_reason=completion.finish_reason,
        )
        yield [*pieces, last]
        return
    model.tracker.check_budget()
    usage = None
    if batches is not None:
        source = batches(messages, config, timeout=model.spec.timeout)
    else:
        assert single is not None
        source = _one_by_one(single(messages, config, timeout=model.spec.timeout))
    async for batch in source:
        for chunk in batch:
            if chunk.usage is not None:
                usage = chunk.usage
        yield batch
    if usage is not None:
        model.tracker.record_call(model.label, usage, model.prices.cost(model.spec, usage), 0)


async def _one_by_one(chunks: AsyncIterator[StreamChunk]) -> AsyncIterator[list[StreamChunk]]:
    async for chunk in chunks:
        yield [chunk]

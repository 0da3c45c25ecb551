"""Batch mode for every benchmark (``--batch``, docs/batch.md), written once for the lifecycle.

The run proceeds in rounds. In a round the normal pipeline runs with its batchable models
wrapped (`BatchSession.wrap`): a call whose reply is known (this run's batch results, then the
call cache) is answered at once; any other call is collected as a batch request and its
instance is deferred (`runs.runner.Deferred`: not written, not scored, not an error). The
round's requests then go out per model through the provider's batch API (`llm.batch`), journaled
in ``<run>/batch/<model>/`` so a killed run resumes by polling the jobs it submitted, and every
result goes through `Model.accept` into the same cache and accounting as a direct call (at the
batch price). The next round re-runs the deferred instances: answered steps return at once and
their next dependent step's calls are collected. Done when a round defers nothing, so the
summary equals a direct run's on the same replies by construction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from personalign.errors import ConfigError, ModelCallError
from personalign.llm.batch import (
    BATCH_PROVIDERS,
    BatchJournal,
    BatchProvider,
    BatchRequest,
    BatchRunner,
    PollPolicy,
    accept_results,
    batch_provider,
    batch_request,
)
from personalign.llm.model import Model
from personalign.llm.types import Completion, GenerateConfig
from personalign.runs.records import RunOutcome
from personalign.runs.runner import Deferred, Runner
from personalign.types import Message

log = logging.getLogger(__name__)

# A round that defers instances always collects new requests, so rounds end; this bounds a bug.
MAX_ROUNDS = 100
# How an OpenAI-compatible server without the batches API answers (then its calls run directly).
NO_BATCH_API = frozenset({404, 405, 501})


def batchable(model: Model) -> bool:
    """Whether the model's calls can go through a batch API: an OpenAI-compatible endpoint (with a
    base URL that implements files + batches) or Anthropic, whose backend builds request bodies."""
    return (
        model.spec.provider in BATCH_PROVIDERS
        and model.spec.base_url is not None
        and getattr(model.backend, "payload", None) is not None
    )


class _BatchedModel:
    """A `Model` whose calls are answered from known replies, or collected and deferred; every
    other attribute is the wrapped model's."""

    def __init__(self, model: Model, session: BatchSession) -> None:
        self._model = model
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    async def complete(
        self, messages: Sequence[Message], config: GenerateConfig | None = None, *, refresh: bool = False
    ) -> Completion:
        return await self._session.answer(self._model, messages, config or GenerateConfig(), refresh=refresh)


@dataclass
class _Collected:
    model: Model
    requests: dict[str, BatchRequest] = field(default_factory=dict)


@dataclass
class BatchStats:
    """What batch mode did in this process, for the summary."""

    rounds: int = 0
    requests: int = 0  # requests collected over all rounds (a resumed run counts them again)
    submitted_jobs: int = 0  # jobs this process created
    jobs: int = 0  # jobs in the run's journals (earlier processes' included)
    wait_s: float = 0.0  # wall time spent submitting, waiting for and downloading jobs
    batched_models: list[str] = field(default_factory=list)
    direct_models: list[str] = field(default_factory=list)


class BatchSession:
    """One batch run: wraps the evaluator's models, runs the rounds, owns the batch clients."""

    def __init__(self, *, poll: PollPolicy | None = None, max_rounds: int = MAX_ROUNDS) -> None:
        self.poll = poll or PollPolicy()
        self.max_rounds = max_rounds
        self.stats = BatchStats()
        self.journal_root: Path | None = None
        self._answers: dict[str, Completion | ModelCallError] = {}
        self._collected: dict[str, _Collected] = {}
        self._clients: dict[str, tuple[BatchProvider, BatchRunner]] = {}

    # --- the models --------------------------------------------------------------------------
    def wrap(self, models: Mapping[str, Model]) -> dict[str, Model]:
        """The role -> model map with every batchable model wrapped; the others (local, scripted,
        endpoints without a batch API) run directly in the same rounds, with a warning."""
        wrapped: dict[str, Model] = {}
        for role, model in models.items():
            if batchable(model):
                wrapped[role] = cast(Model, _BatchedModel(model, self))
                if model.label not in self.stats.batched_models:
                    self.stats.batched_models.append(model.label)
            else:
                wrapped[role] = model
                if model.label not in self.stats.direct_models:
                    self.stats.direct_models.append(model.label)
                    log.warning(
                        "--batch: %s (provider %s) has no batch API; its calls run directly "
                        "(batch: %s with a base URL)",
                        model.label,
                        model.spec.provider,
                        ", ".join(BATCH_PROVIDERS),
                    )
        return wrapped

    async def answer(
        self, model: Model, messages: Sequence[Message], config: GenerateConfig, *, refresh: bool
    ) -> Completion:
        """The reply to a call if it is known, else collect it and raise `Deferred`.

        This run's batch result comes first, as the direct call's reply would (every time: a
        deferred instance asks again in each round until it is written); a per-request error is
        raised as the direct call's failure would be. Then the cache, unless `refresh`. A model
        whose endpoint turned out to have no batch API is called directly.
        """
        if model.label in self.stats.direct_models:
            return await model.complete(messages, config, refresh=refresh)
        key = model.key_for(messages, config)
        result = self._answers.get(key)
        if isinstance(result, ModelCallError):
            raise ModelCallError(str(result), retryable=result.retryable, status_code=result.status_code)
        if result is not None:
            return result
        if not refresh:
            hit = model.cached(key)
            if hit is not None:
                return hit
        collected = self._collected.setdefault(model.label, _Collected(model))
        if key not in collected.requests:
            collected.requests[key] = batch_request(model, messages, config)
        raise Deferred(key)

    # --- the rounds --------------------------------------------------------------------------
    async def run(self, runner: Runner[Any], items: Sequence[Any]) -> RunOutcome:
        """Evaluate `items` in rounds until none waits for a reply; the outcome covers them all."""
        if self.journal_root is None:
            raise ConfigError("batch mode needs the run directory (journal_root) before it runs")
        only: set[str] | None = None
        evaluated = 0
        skipped = 0
        try:
            while True:
                self.stats.rounds += 1
                outcome = await runner.run(items, only=only)
                evaluated += outcome.evaluated
                if self.stats.rounds == 1:
                    skipped = outcome.skipped
                    runner.on_skipped = None  # later rounds' "skipped" are earlier rounds' work
                await asyncio.sleep(0)  # let sibling calls of deferred instances collect theirs
                if outcome.status in ("interrupted", "stopped_budget") or not outcome.deferred:
                    outcome.evaluated, outcome.skipped = evaluated, skipped
                    return outcome
                if not self._collected:
                    raise RuntimeError(
                        f"batch round {self.stats.rounds}: instances waited, nothing was asked"
                    )
                if self.stats.rounds >= self.max_rounds:
                    raise RuntimeError(f"batch mode did not finish within {self.max_rounds} rounds")
                log.info(
                    "batch round %d: %d %s waiting, %d requests",
                    self.stats.rounds,
                    len(outcome.deferred),
                    "instances",
                    sum(len(c.requests) for c in self._collected.values()),
                )
                await self._flush()
                only = set(outcome.deferred)
        finally:
            await self.aclose()

    async def _flush(self) -> None:
        """Send the round's requests (per model, concurrently), wait, and keep the results."""
        collected, self._collected = self._collected, {}
        started = time.monotonic()
        try:
            await asyncio.gather(*(self._send(c) for c in collected.values()))
        finally:
            self.stats.wait_s += time.monotonic() - started

    async def _send(self, collected: _Collected) -> None:
        model = collected.model
        client = await self._client(model)
        if client is None:  # no batch API there: the next round calls this model directly
            return
        _, runner = client
        requests = list(collected.requests.values())
        self.stats.requests += len(requests)
        outcome = await runner.run(requests)
        self.stats.submitted_jobs += outcome.submitted
        results = accept_results(model, outcome)
        self._answers.update(results)
        if outcome.errors or outcome.missing:
            log.warning(
                "batch: %s: %d of %d requests came back as errors or not at all",
                model.label,
                len(outcome.errors) + len(outcome.missing),
                len(requests),
            )

    async def _client(self, model: Model) -> tuple[BatchProvider, BatchRunner] | None:
        """The model's batch client and journaled runner; None when its OpenAI-compatible
        endpoint answers that it has no batches API (asked once, before the first job)."""
        if model.label not in self._clients:
            assert self.journal_root is not None
            directory = self.journal_root / _slug(model.label)
            provider = batch_provider(model.spec)
            if not directory.exists():
                try:
                    await provider.find("personalign-probe")  # lists the batches (OpenAI shapes)
                except ModelCallError as exc:
                    if exc.status_code not in NO_BATCH_API:
                        await provider.aclose()
                        raise
                    await provider.aclose()
                    self.stats.batched_models.remove(model.label)
                    self.stats.direct_models.append(model.label)
                    log.warning(
                        "--batch: %s has no batch API at %s (HTTP %s); its calls run directly",
                        model.label,
                        model.spec.base_url,
                        exc.status_code,
                    )
                    return None
            journal = BatchJournal(directory, provider.name)
            self._clients[model.label] = (provider, BatchRunner(provider, journal, poll=self.poll))
        return self._clients[model.label]

    async def aclose(self) -> None:
        """Close the batch clients (their journals are already on disk)."""
        clients, self._clients = self._clients, {}
        for provider, runner in clients.values():
            self.stats.jobs += len(runner.journal.jobs)
            await provider.aclose()

    def record(self) -> dict[str, Any]:
        """The summary's ``batch`` section."""
        s = self.stats
        return {
            "batch": True,
            "rounds": s.rounds,
            "jobs": s.jobs,
            "submitted_jobs": s.submitted_jobs,
            "requests": s.requests,
            "wait_s": round(s.wait_s, 3),
            "batched_models": s.batched_models,
            "direct_models": s.direct_models,
        }


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).strip("_") or "model"

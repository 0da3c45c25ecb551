"""Provider batch APIs (OpenAI Batch, Anthropic Message Batches) at half price, below the run
lifecycle: build requests from a `Model`'s calls, run them through a journaled `BatchRunner`,
and turn the results into `Completion`s through the same cache and accounting as direct calls.

    provider = batch_provider(model.spec)
    runner = BatchRunner(provider, BatchJournal(run_dir / "batch", provider.name))
    outcome = await runner.run([batch_request(model, messages, config) for ...])
    completions = accept_results(model, outcome)  # custom_id -> Completion | ModelCallError
"""

from __future__ import annotations

from collections.abc import Sequence

from personalign.errors import ConfigError, ModelCallError
from personalign.llm.batch.core import (
    BatchItem,
    BatchJournal,
    BatchOutcome,
    BatchPending,
    BatchProvider,
    BatchRequest,
    BatchRunner,
    JobRecord,
    JobState,
    PollPolicy,
    ResultReport,
    match_results,
)
from personalign.llm.model import Model
from personalign.llm.spec import ModelSpec
from personalign.llm.types import Completion, GenerateConfig
from personalign.types import Message

BATCH_PROVIDERS = ("openai", "openai-compat", "anthropic")


def batch_provider(spec: ModelSpec) -> BatchProvider:
    """The batch client for the spec's endpoint (``openai-compat`` servers must implement the
    files and batches API); ConfigError for providers without one."""
    if spec.provider in ("openai", "openai-compat"):
        from personalign.llm.batch.openai import OpenAIBatchProvider

        return OpenAIBatchProvider(spec)
    if spec.provider == "anthropic":
        from personalign.llm.batch.anthropic import AnthropicBatchProvider

        return AnthropicBatchProvider(spec)
    raise ConfigError(
        f"{spec.label}: no batch API for provider {spec.provider!r} (batch: {', '.join(BATCH_PROVIDERS)})"
    )


def batch_request(model: Model, messages: Sequence[Message], config: GenerateConfig) -> BatchRequest:
    """The call as a batch request: the body a direct call would send, under its cache key."""
    payload = getattr(model.backend, "payload", None)
    if payload is None:
        raise ConfigError(f"{model.label}: its backend cannot build batch requests")
    return BatchRequest(model.key_for(messages, config), payload(messages, config))


def accept_results(model: Model, outcome: BatchOutcome) -> dict[str, Completion | ModelCallError]:
    """Each result as a direct call's would be: answers cached and accounted at the batch price
    (`Model.accept`), per-request errors and missing answers as `ModelCallError`s (counted as
    errors), so the caller records them against their instances."""
    results: dict[str, Completion | ModelCallError] = {}
    for cid, item in outcome.items.items():
        if item.response is not None:
            results[cid] = model.accept(cid, item.response, batch=True)
        else:
            model.tracker.record_error(model.label, 0)
            results[cid] = ModelCallError(
                f"{model.label} batch: {item.error}", retryable=item.retryable, status_code=item.status_code
            )
    for cid in outcome.missing:
        model.tracker.record_error(model.label, 0)
        results[cid] = ModelCallError(f"{model.label} batch: no result line for this request", retryable=True)
    return results


__all__ = [
    "BATCH_PROVIDERS",
    "BatchItem",
    "BatchJournal",
    "BatchOutcome",
    "BatchPending",
    "BatchProvider",
    "BatchRequest",
    "BatchRunner",
    "JobRecord",
    "JobState",
    "PollPolicy",
    "ResultReport",
    "accept_results",
    "batch_provider",
    "batch_request",
    "match_results",
]

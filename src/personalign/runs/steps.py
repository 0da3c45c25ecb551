"""`StepRunner`: runs the named steps of one instance, recording each and reusing finished ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from personalign.errors import BudgetExceeded, ModelCallError, ParseError
from personalign.judges.parsing import snippet, split_reasoning
from personalign.llm.model import Model, call_priority
from personalign.llm.types import Completion, GenerateConfig
from personalign.prompts import PromptTemplate
from personalign.runs.records import StepRecord
from personalign.types import Message

T = TypeVar("T")

REASK = (
    "Your answer could not be used: {reason}. Answer again, following the required format exactly, "
    "with nothing else."
)


UNFINISHED = "not finished: the instance stopped (another step failed) before this step's reply came"

# What a step does with a reply cut off at max_tokens or an empty reply. "error": the step fails
# (the personalign protocol: a truncated text is never scored). "score": the text it got is
# parsed and scored, as the papers' code does (the paper protocol); the flag still counts it.
TruncationRule = Literal["error", "score"]


class StepFailed(Exception):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step


async def gather_steps(*steps: Awaitable[T]) -> list[T]:
    """Await concurrent steps of one instance until every one has ended, then raise the first
    failure. `asyncio.gather` alone raises at the first failure and leaves the siblings running
    unawaited: their replies were lost to the instance's record, and on a local model the last
    instance's orphaned call held the process open after the run had finished."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


class StepRunner:
    """Executes steps for one instance.

    A step already present with status ``ok`` in ``previous`` is reused without a call (resume,
    re-scoring). A failed call or unparseable output is recorded with status ``error`` and
    raises `StepFailed`; it is never turned into a score. Every reply's finish reason is
    recorded; truncated and empty replies are flagged and handled by `truncation`. A rejected
    reply is evicted from the call cache, and a rejected reply that came from the cache is asked
    for once more, so that neither this run nor a re-run reads the same bad reply again.
    """

    def __init__(
        self, previous: Mapping[str, StepRecord] | None = None, *, truncation: TruncationRule = "error"
    ) -> None:
        self.previous = dict(previous or {})
        self.steps: dict[str, StepRecord] = {}
        self.truncation = truncation

    def reuse(self, name: str) -> StepRecord | None:
        record = self.previous.get(name)
        if record is not None and record.status == "ok" and not _unanswered(record):
            self.steps[name] = record
            return record
        return None

    def record(self, name: str, role: str, parsed: Any, flags: list[str] | None = None) -> Any:
        """Record a step decided without a model call (e.g. an empty inference)."""
        self.steps[name] = StepRecord(role=role, parsed=parsed, flags=flags or [])
        return parsed

    async def call(
        self,
        name: str,
        *,
        role: str,
        model: Model,
        template: PromptTemplate,
        values: Mapping[str, str],
        config: GenerateConfig,
        parse: Callable[[str], T],
        reasks: int = 0,
    ) -> T:
        """Call `model` with the rendered template and parse its answer.

        On a parse failure, re-ask up to `reasks` times by showing the model its answer and
        the reason it failed (a new prompt, so a new cache entry).
        """
        return await self.call_messages(
            name,
            role=role,
            model=model,
            messages=template.render(**values),
            config=config,
            parse=parse,
            template=template,
            reasks=reasks,
        )

    async def call_messages(
        self,
        name: str,
        *,
        role: str,
        model: Model,
        messages: Sequence[Message],
        config: GenerateConfig,
        parse: Callable[[str], T],
        template: PromptTemplate | None = None,
        reasks: int = 0,
    ) -> T:
        """As `call`, with an explicit message list (multi-turn simulations); `template`, when
        given, names the prompt in the record."""
        previous = self.reuse(name)
        if previous is not None:
            return previous.parsed  # type: ignore[no-any-return]
        record = StepRecord(
            role=role,
            model=model.label,
            prompt=template.name if template else None,
            prompt_sha256=template.sha256 if template else None,
            # Until a reply is accepted: an instance whose other step fails meanwhile is written
            # with this step unfinished, and a re-run must call it, not reuse it.
            status="error",
            error=UNFINISHED,
        )
        earlier = self.previous.get(name)
        if earlier is not None:  # a failed step tried again: keep what went wrong before
            record.errors = [*earlier.errors, *([earlier.error] if earlier.error else [])]
        self.steps[name] = record
        messages = list(messages)
        attempt, refresh, refreshes_left = 0, False, 1
        while True:
            try:
                # Later steps of an instance go first: finish started instances before new ones.
                with call_priority(len(self.steps)):
                    completion = await model.complete(messages, config, refresh=refresh)
                refresh = False
            except (ModelCallError, BudgetExceeded) as exc:
                record.status, record.error = "error", f"model call failed: {exc}"
                raise StepFailed(name, record.error) from None
            text = self._account(record, completion)
            try:
                rejection = self._rejection(completion, text)
                if rejection is not None:
                    raise _Rejected(rejection)
                parsed = parse(text)
            except (ParseError, _Rejected) as exc:
                model.reject(completion)
                if completion.cached and refreshes_left:
                    # A bad reply stored by an earlier run (or a process killed before evicting it).
                    record.errors.append(f"cached reply rejected: {exc}")
                    _flag(record, "refreshed")
                    refresh, refreshes_left = True, refreshes_left - 1
                    continue
                if isinstance(exc, ParseError) and attempt < reasks:
                    attempt += 1
                    record.flags.append("reask")
                    messages = [
                        *messages,
                        Message(role="assistant", content=completion.text),
                        Message(role="user", content=REASK.format(reason=str(exc))),
                    ]
                    continue
                record.status = "error"
                what = "unparseable output" if isinstance(exc, ParseError) else "rejected output"
                record.error = f"{what}: {exc} (raw: {snippet(completion.text)!r})"
                raise StepFailed(name, record.error) from None
            record.status, record.error, record.parsed = "ok", None, parsed
            return parsed

    def _account(self, record: StepRecord, completion: Completion) -> str:
        """Add one reply to the record (raw text, reasoning, finish reason, flags, tokens, cost);
        return the text to parse, with inline ``<think>`` reasoning moved into the record."""
        record.raw.append(completion.text)
        record.finish_reasons.append(completion.finish_reason)
        reasoning = (completion.raw or {}).get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            record.reasoning.append(reasoning)
        text = completion.text
        split = split_reasoning(text)
        if split.reasoning:
            record.reasoning.append(split.reasoning)
            _flag(record, "inline_reasoning")
            text = split.final
        if completion.truncated:
            _flag(record, "truncated")
        if not text.strip():
            _flag(record, "empty")
        record.prompt_tokens += completion.usage.prompt_tokens
        record.completion_tokens += completion.usage.completion_tokens
        record.reasoning_tokens += completion.usage.reasoning_tokens
        unsent = (completion.raw or {}).get("unsent")
        for name in unsent if isinstance(unsent, list) else []:
            _flag(record, f"{name}_not_sent")
        if record.cost_usd is not None:
            record.cost_usd = None if completion.cost_usd is None else record.cost_usd + completion.cost_usd
        record.cached = completion.cached if len(record.raw) == 1 else record.cached and completion.cached
        record.latency_s += completion.latency_s
        return text

    def _rejection(self, completion: Completion, text: str) -> str | None:
        """Why the truncation rule rejects this reply before parsing, or None."""
        if self.truncation == "score":
            return None
        if completion.truncated:
            return f"reply cut off at the token limit ({completion.usage.completion_tokens} tokens)"
        if not text.strip():
            return "empty reply"
        return None


class _Rejected(Exception):
    """A reply refused by the truncation rule (not a parse failure: it is not re-asked)."""


def _unanswered(record: StepRecord) -> bool:
    """A model step with neither a reply nor a value: written "ok" by an older version while it was
    still waiting for its reply, so it is called again, never reused as a None value."""
    return record.model is not None and not record.raw and record.parsed is None


def _flag(record: StepRecord, flag: str) -> None:
    if flag not in record.flags:
        record.flags.append(flag)

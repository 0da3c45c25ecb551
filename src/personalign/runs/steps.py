"""`StepRunner`: runs the named steps of one instance, recording each and reusing finished ones."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from personalign.errors import BudgetExceeded, ModelCallError, ParseError
from personalign.judges.parsing import snippet
from personalign.llm.model import Model, call_priority
from personalign.llm.types import GenerateConfig
from personalign.prompts import PromptTemplate
from personalign.runs.records import StepRecord
from personalign.types import Message

T = TypeVar("T")

REASK = (
    "Your answer could not be used: {reason}. Answer again, following the required format exactly, "
    "with nothing else."
)


class StepFailed(Exception):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"{step}: {message}")
        self.step = step


class StepRunner:
    """Executes steps for one instance.

    A step already present with status ``ok`` in ``previous`` is reused without a call (resume,
    re-scoring). A failed call or unparseable output is recorded with status ``error`` and
    raises `StepFailed`; it is never turned into a score.
    """

    def __init__(self, previous: Mapping[str, StepRecord] | None = None) -> None:
        self.previous = dict(previous or {})
        self.steps: dict[str, StepRecord] = {}

    def reuse(self, name: str) -> StepRecord | None:
        record = self.previous.get(name)
        if record is not None and record.status == "ok":
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
        )
        self.steps[name] = record
        messages = list(messages)
        for attempt in range(reasks + 1):
            try:
                # Later steps of an instance go first: finish started instances before new ones.
                with call_priority(len(self.steps)):
                    completion = await model.complete(messages, config)
            except (ModelCallError, BudgetExceeded) as exc:
                record.status, record.error = "error", f"model call failed: {exc}"
                raise StepFailed(name, record.error) from None
            record.raw.append(completion.text)
            reasoning = (completion.raw or {}).get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                record.reasoning.append(reasoning)
            record.prompt_tokens += completion.usage.prompt_tokens
            record.completion_tokens += completion.usage.completion_tokens
            if record.cost_usd is not None:
                record.cost_usd = (
                    None if completion.cost_usd is None else record.cost_usd + completion.cost_usd
                )
            record.cached = completion.cached if attempt == 0 else record.cached and completion.cached
            record.latency_s += completion.latency_s
            try:
                parsed = parse(completion.text)
            except ParseError as exc:
                if attempt < reasks:
                    record.flags.append("reask")
                    messages = [
                        *messages,
                        Message(role="assistant", content=completion.text),
                        Message(role="user", content=REASK.format(reason=str(exc))),
                    ]
                    continue
                record.status = "error"
                record.error = f"unparseable output: {exc} (raw: {snippet(completion.text)!r})"
                raise StepFailed(name, record.error) from None
            record.parsed = parsed
            return parsed
        raise AssertionError("unreachable")  # pragma: no cover

"""Evaluating one item: the subject answers from the history, the judge checks the answer.

Two named steps per item, run by personalign's `StepRunner` (recorded with raw output, parsed value
and status; reused on resume; `answer` is kept on rescore): ``answer`` (subject) and ``judge``. A
failed, cut-off or unparseable reply makes the item an error, never a score.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, snippet
from personalign.llm.backends.scripted import register_schema_responder
from personalign.llm.model import Model
from personalign.llm.types import GenerateConfig
from personalign.prompts import PromptTemplate, parse_template
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import StepFailed, StepRunner
from personalign.types import Message
from toy_benchmark.data import ColourItem

PROMPTS = ("colour/answer", "colour/judge")
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"correct": {"type": "boolean"}},
    "required": ["correct"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class ColourConfig:
    """What defines a run: the model of each role, how much history the subject sees, the protocol."""

    subject: str
    judge: str
    context: str = "full"  # full | last (only the last user turn)
    protocol: str = "personalign"
    max_tokens: int = 64

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@cache
def template(name: str) -> PromptTemplate:
    """A prompt of this package (`prompts/<stem>.md`), by its manifest name ``colour/<stem>``."""
    stem = name.split("/", 1)[1]
    text = resources.files("toy_benchmark").joinpath(f"prompts/{stem}.md").read_text("utf-8")
    return parse_template(name, text)


def prompt_hashes() -> dict[str, str]:
    return {name: template(name).sha256 for name in PROMPTS}


def render_history(item: ColourItem, context: str) -> str:
    """The history as the subject sees it: every turn, or only the user's last turn."""
    turns: Sequence[Message] = item.history
    if context == "last":
        turns = [m for m in item.history if m.role == "user"][-1:]
    return "\n".join(f"{m.role}: {m.content}" for m in turns)


def parse_answer(text: str) -> str:
    answer = text.strip()
    if not answer:
        raise ParseError("empty answer")
    return answer


def parse_verdict(text: str) -> bool:
    """The judge's ``{"correct": true|false}``; anything else is a ParseError (re-asked once)."""
    value = extract_json(text)
    if not isinstance(value, dict) or not isinstance(value.get("correct"), bool):
        raise ParseError(f'expected {{"correct": true|false}}, got {snippet(text)!r}')
    return bool(value["correct"])


def mentions(answer: str, colour: str) -> bool:
    """Exact-match score: the answer names the gold colour as a word."""
    return re.search(rf"\b{re.escape(colour.lower())}\b", answer.lower()) is not None


class ColourEvaluator:
    """personalign's `Evaluator` for this benchmark: `instance_id` and `evaluate`."""

    def __init__(self, config: ColourConfig, subject: Model, judge: Model) -> None:
        self.config = config
        self.subject = subject
        self.judge = judge
        self.answer_config = GenerateConfig(max_tokens=config.max_tokens)
        self.judge_config = GenerateConfig(
            max_tokens=32, json_schema=VERDICT_SCHEMA, schema_name="colour_verdict"
        )

    def instance_id(self, item: ColourItem) -> str:
        return item.id

    async def evaluate(
        self, item: ColourItem, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        steps = StepRunner(previous)
        record = InstanceRecord(instance_id=item.id, meta={"kind": item.kind})
        try:
            answer = await steps.call(
                "answer",
                role="subject",
                model=self.subject,
                template=template("colour/answer"),
                values={"history": render_history(item, self.config.context), "question": item.question},
                config=self.answer_config,
                parse=parse_answer,
            )
            correct = await steps.call(
                "judge",
                role="judge",
                model=self.judge,
                template=template("colour/judge"),
                values={"colour": item.colour, "answer": answer},
                config=self.judge_config,
                parse=parse_verdict,
                reasks=1,
            )
        except StepFailed as exc:
            record.steps = steps.steps
            record.results = {"answer": TaskResult(status="error", error=str(exc))}
            return record
        record.steps = steps.steps
        scores = {"exact": mentions(answer, item.colour), "judged": correct, "answer": answer}
        record.results = {"answer": TaskResult(status="ok", scores=scores)}
        return record


def _scripted_verdict(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The `scripted/...` model's judge answer (tests, dry runs): correct iff the colour is named."""
    user = next(m.content for m in messages if m.role == "user")
    colour = re.search(r"^Expected colour:\s*(.*)$", user, re.MULTILINE)
    answer = user.split("Answer:", 1)[-1]
    return json.dumps({"correct": bool(colour) and mentions(answer, colour.group(1) if colour else "")})


register_schema_responder("colour_", _scripted_verdict)

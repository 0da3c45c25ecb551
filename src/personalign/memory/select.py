"""Select and apply: which retrieved memories shape a message in a given communication context,
and the compact memory block the subject model is shown.

Each preference is decided by a per-category policy: ``apply``, ``suppress`` or ``judge`` (a model
judges its appropriateness for the recipient, task and formality, with schema-constrained JSON).
Facts are always kept. Among applied preferences, two for the same context and category conflict;
the newer wins. A failed judge call is recorded on the decision (``by="error"``) and the preference
is handled by ``on_error`` (suppressed by default), never silently counted as a judgement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from personalign.errors import ConfigError, ParseError
from personalign.history import SPEAKER, format_history
from personalign.judges.parsing import extract_json, require_object
from personalign.llm import GenerateConfig, Model
from personalign.memory.supersession import factor_key
from personalign.memory.types import (
    CommunicationContext,
    Decision,
    MemoryRecord,
    RetrievedItem,
    SelectionDecision,
    StoredSession,
)
from personalign.prompts import load_template
from personalign.runs.steps import StepFailed, StepRunner

TEMPLATE = "memory/judge_apply"
Policy = Literal["apply", "suppress", "judge"]
POLICIES = ("apply", "suppress", "judge")

APPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string"},
        "decision": {"type": "string", "enum": ["apply", "suppress"]},
    },
    "required": ["reason", "decision"],
}


@dataclass(frozen=True)
class SelectionPolicy:
    """Per-category handling of preferences; ``default`` covers categories not listed."""

    default: Policy = "judge"
    categories: Mapping[str, Policy] = field(default_factory=dict)
    on_error: Decision = "suppress"

    def __post_init__(self) -> None:
        for name, policy in {"default": self.default, **self.categories}.items():
            if policy not in POLICIES:
                raise ConfigError(f"selection policy for {name!r} must be one of {', '.join(POLICIES)}")

    def for_category(self, category: str) -> Policy:
        return self.categories.get(category.strip().lower(), self.default)


def parse_apply_decision(text: str) -> tuple[Decision, str]:
    data = require_object(extract_json(text), "apply decision")
    decision = data.get("decision")
    if decision not in ("apply", "suppress"):
        raise ParseError(f"apply decision: 'decision' must be 'apply' or 'suppress', got {decision!r}")
    reason = data.get("reason", "")
    return decision, reason.strip() if isinstance(reason, str) else ""


async def judge_preference(
    judge: Model, memory: MemoryRecord, context: CommunicationContext, *, reasks: int = 1
) -> tuple[Decision, str]:
    """Ask ``judge`` whether ``memory`` should shape a message in ``context``."""
    steps = StepRunner()
    result: tuple[Decision, str] = await steps.call(
        "apply",
        role="judge",
        model=judge,
        template=load_template(TEMPLATE),
        values={
            "context": context.describe(),
            "category": memory.category,
            "preference": memory.content,
        },
        config=GenerateConfig(temperature=0.0, max_tokens=200, json_schema=APPLY_SCHEMA, schema_name="apply"),
        parse=parse_apply_decision,
        reasks=reasks,
    )
    return result


async def select_memories(
    memories: Sequence[MemoryRecord],
    context: CommunicationContext,
    *,
    judge: Model | None = None,
    policy: SelectionPolicy | None = None,
) -> list[SelectionDecision]:
    """Decide apply/suppress for every memory (in order); facts are applied as they are."""
    policy = policy or SelectionPolicy(default="judge" if judge is not None else "apply")

    async def decide(memory: MemoryRecord) -> SelectionDecision:
        if memory.kind != "preference":
            return SelectionDecision(memory, "apply", "facts are always kept", "kind")
        rule = policy.for_category(memory.category)
        if rule != "judge":
            return SelectionDecision(memory, rule, f"policy for category {memory.category!r}", "policy")
        if judge is None:
            raise ConfigError(f"category {memory.category!r} is to be judged but no judge model was given")
        try:
            decision, reason = await judge_preference(judge, memory, context)
        except StepFailed as exc:
            return SelectionDecision(memory, policy.on_error, str(exc), "error")
        return SelectionDecision(memory, decision, reason, judge.label)

    decisions = list(await asyncio.gather(*(decide(m) for m in memories)))
    # Conflicts: two applied preferences for the same context and category; the newer one wins.
    newest: dict[tuple[str, str], SelectionDecision] = {}
    for d in decisions:
        if d.decision == "apply" and d.memory.kind == "preference":
            key = (factor_key(d.memory.context_factor), d.memory.category)
            if key not in newest or d.memory.valid_from >= newest[key].memory.valid_from:
                newest[key] = d
    out = []
    for d in decisions:
        key = (factor_key(d.memory.context_factor), d.memory.category)
        if d.decision == "apply" and d.memory.kind == "preference" and newest[key] is not d:
            d = SelectionDecision(
                d.memory, "suppress", f"conflicts with newer memory {newest[key].memory.id}", "conflict"
            )
        out.append(d)
    return out


def render_memory_block(
    *,
    memories: Sequence[MemoryRecord] = (),
    sessions: Sequence[StoredSession] = (),
    header: str = "What you remember about this user (use it where it fits this request):",
    sessions_header: str = "Earlier conversations with this user that may matter here:",
) -> str:
    """A compact block for the subject model's prompt: memory statements, then excerpts of the
    retrieved sessions in chronological order (only their dialogue; never any annotation)."""
    parts: list[str] = []
    if memories:
        lines = [
            f"- ({m.context_factor}) {m.content}" if m.context_factor else f"- {m.content}" for m in memories
        ]
        parts.append(header + "\n" + "\n".join(lines))
    if sessions:
        ordered = sorted(sessions, key=lambda s: (s.timestamp, s.seq))
        bodies = [
            "\n\n".join(f"#### {SPEAKER.get(t.role, t.role)}\n{t.content.strip()}" for t in s.turns)
            for s in ordered
        ]
        parts.append(sessions_header + "\n\n" + format_history(bodies))
    return "\n\n".join(parts) if parts else "(nothing remembered about this user yet)"


def applied(decisions: Sequence[SelectionDecision]) -> list[MemoryRecord]:
    return [d.memory for d in decisions if d.decision == "apply"]


def memories_of(items: Sequence[RetrievedItem]) -> list[MemoryRecord]:
    return [i.memory for i in items if i.memory is not None]

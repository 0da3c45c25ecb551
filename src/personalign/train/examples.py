"""Training examples from HiCUPID's train split, built the way a run prompts the subject.

An example keeps its prompt in three parts so the history can be shortened from the left, a
whole round at a time, without ever touching the instruction or the question:
``prefix`` (the system instruction), ``history`` (alternating user/assistant messages chosen by
the run's context strategy) and ``suffix`` (the question, preceded by the instruction and its
acknowledgement when the instruction is sent in the user role). SFT learns ``chosen`` (the
personalized answer); DPO prefers it to ``rejected`` (the general answer).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from personalign.benchmarks.hicupid.context import ContextOptions, make_context
from personalign.benchmarks.hicupid.data import HiCupidDataset
from personalign.benchmarks.hicupid.schema import HiCupidQA
from personalign.benchmarks.hicupid.steps import TEMPLATES, InstructionRole, build_messages
from personalign.errors import ConfigError
from personalign.prompts import load_template
from personalign.types import Message


@dataclass(frozen=True)
class TrainExample:
    """One question's prompt (prefix + history + suffix) and its preferred / dispreferred answers."""

    id: str
    prefix: tuple[Message, ...]
    history: tuple[Message, ...]
    suffix: tuple[Message, ...]
    chosen: str
    rejected: str

    @property
    def prompt(self) -> list[Message]:
        return [*self.prefix, *self.history, *self.suffix]

    def rounds(self) -> list[tuple[Message, ...]]:
        """The history cut at turn boundaries: each round starts at a user message."""
        out: list[list[Message]] = []
        for message in self.history:
            if message.role == "user" or not out:
                out.append([message])
            else:
                out[-1].append(message)
        return [tuple(r) for r in out]

    def drop_oldest(self, n_rounds: int) -> TrainExample:
        """The same example without its ``n_rounds`` oldest history rounds (never the question)."""
        kept = self.rounds()[n_rounds:]
        history = tuple(m for r in kept for m in r)
        return TrainExample(self.id, self.prefix, history, self.suffix, self.chosen, self.rejected)

    def to_record(self) -> dict[str, object]:
        def dump(ms: Sequence[Message]) -> list[dict[str, str]]:
            return [{"role": m.role, "content": m.content} for m in ms]

        return {
            "id": self.id,
            "prefix": dump(self.prefix),
            "history": dump(self.history),
            "suffix": dump(self.suffix),
            "chosen": self.chosen,
            "rejected": self.rejected,
        }


def split_prompt(
    history: Sequence[Message], question: str, instruction: str, role: InstructionRole, acknowledgement: str
) -> tuple[tuple[Message, ...], tuple[Message, ...], tuple[Message, ...]]:
    """The run's subject prompt (`build_messages`) cut into prefix, history and suffix."""
    messages = build_messages(history, question, instruction, role, acknowledgement)
    n_prefix = 1 if role == "system" else 0
    prefix = tuple(messages[:n_prefix])
    body = tuple(messages[n_prefix : n_prefix + len(history)])
    suffix = tuple(messages[n_prefix + len(history) :])
    assert body == tuple(history), "build_messages must keep the history contiguous"
    return prefix, body, suffix


async def build_examples(
    dataset: HiCupidDataset,
    *,
    splits: Iterable[str] = ("train",),
    context: str = "full",
    instruction_role: InstructionRole = "system",
    options: ContextOptions | None = None,
    limit: int | None = None,
) -> list[TrainExample]:
    """One example per question of ``splits``, its history chosen by the ``context`` strategy (the
    same strategies and zero-shot prompt a `personalign run hicupid` uses, so a model is trained the
    way it is evaluated)."""
    questions: list[HiCupidQA] = dataset.questions(splits)
    if not questions:
        raise ConfigError(f"{dataset.source}: no questions in split(s) {sorted(set(splits))}")
    if limit is not None:
        questions = questions[:limit]
    strategy = make_context(context, options)
    instruction = load_template(TEMPLATES["instruction"]).user
    acknowledgement = load_template(TEMPLATES["acknowledge"]).user
    out = []
    for qa in questions:
        selection = await strategy.select(dataset.history(qa.user_id), qa)
        prefix, history, suffix = split_prompt(
            selection.messages, qa.question, instruction, instruction_role, acknowledgement
        )
        out.append(TrainExample(qa.id, prefix, history, suffix, qa.personalized_answer, qa.general_answer))
    return out


def examples_sha256(examples: Iterable[TrainExample]) -> str:
    """Hash of the examples as trained on (for the manifest): changes with data, context or prompt."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(json.dumps(ex.to_record(), sort_keys=True).encode())
        digest.update(b"\n")
    return digest.hexdigest()

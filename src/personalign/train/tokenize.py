"""Tokenization for training, done once over the whole conversation.

The chat template is rendered ONCE over prompt + answer and tokenized once; the loss is masked to
the answer by character offsets (the tokens that start at or after the point where the
generation prompt ends). So no BOS is inserted inside the answer, and the answer ends with the
template's own end-of-turn, exactly what the model must emit at inference. An over-long example
loses its oldest history rounds (left truncation at turn boundaries); the instruction and the
question are never cut, and an example that does not fit even without history is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from personalign.errors import ConfigError
from personalign.train.examples import TrainExample
from personalign.types import Message

IGNORE_INDEX = -100


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer this module uses."""

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def __call__(self, text: str, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class TokenizedSFT:
    """Token ids and labels (IGNORE_INDEX outside the answer) of one SFT example."""

    input_ids: list[int]
    labels: list[int]
    dropped_rounds: int

    def to_record(self) -> dict[str, list[int]]:
        return {
            "input_ids": self.input_ids,
            "labels": self.labels,
            "attention_mask": [1] * len(self.input_ids),
        }


def _dicts(messages: Sequence[Message]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def render(tokenizer: ChatTokenizer, prompt: Sequence[Message], answer: str) -> tuple[str, int]:
    """The template rendered once over prompt + answer, and where the answer starts in it."""
    text = tokenizer.apply_chat_template(
        _dicts([*prompt, Message(role="assistant", content=answer)]), tokenize=False
    )
    head = tokenizer.apply_chat_template(_dicts(prompt), tokenize=False, add_generation_prompt=True)
    if not isinstance(text, str) or not isinstance(head, str) or not text.startswith(head):
        raise ConfigError(
            "the chat template does not render the prompt as a prefix of prompt + answer; "
            "cannot locate the answer to train on"
        )
    return text, len(head)


def tokenize_sft_text(tokenizer: ChatTokenizer, text: str, answer_start: int) -> tuple[list[int], list[int]]:
    """Tokenize the rendered text once; label only tokens that start inside the answer."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    offsets = encoded["offset_mapping"]
    labels = [
        tok if start >= answer_start and end > start else IGNORE_INDEX
        for tok, (start, end) in zip(ids, offsets, strict=True)
    ]
    return ids, labels


def token_count(tokenizer: ChatTokenizer, example: TrainExample, answer: str) -> int:
    text, _ = render(tokenizer, example.prompt, answer)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def fit(
    tokenizer: ChatTokenizer, example: TrainExample, max_length: int | None, answers: Sequence[str]
) -> tuple[TrainExample, int]:
    """The example with the fewest oldest rounds dropped so that prompt + each answer fits in
    ``max_length`` tokens; the question and instruction are always kept (binary search)."""
    if max_length is None:
        return example, 0

    def fits(n: int) -> bool:
        candidate = example.drop_oldest(n)
        return all(token_count(tokenizer, candidate, a) <= max_length for a in answers)

    n_rounds = len(example.rounds())
    if fits(0):
        return example, 0
    if not fits(n_rounds):
        raise ConfigError(
            f"example {example.id}: the instruction, question and answer alone exceed --max-length "
            f"{max_length} tokens; raise --max-length"
        )
    lo, hi = 0, n_rounds  # fits(hi) is True, fits(lo) is False
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return example.drop_oldest(hi), hi


def tokenize_sft(tokenizer: ChatTokenizer, example: TrainExample, max_length: int | None) -> TokenizedSFT:
    """One SFT example: left-truncated to fit, rendered once, loss masked to the answer."""
    fitted, dropped = fit(tokenizer, example, max_length, [example.chosen])
    text, start = render(tokenizer, fitted.prompt, fitted.chosen)
    ids, labels = tokenize_sft_text(tokenizer, text, start)
    return TokenizedSFT(ids, labels, dropped)


def dpo_record(tokenizer: ChatTokenizer, example: TrainExample, max_length: int | None) -> dict[str, Any]:
    """One DPO row in TRL's conversational format, its history left-truncated so prompt + chosen and
    prompt + rejected both fit (TRL then never truncates, neither end)."""
    fitted, dropped = fit(tokenizer, example, max_length, [example.chosen, example.rejected])
    return {
        "prompt": _dicts(fitted.prompt),
        "chosen": [{"role": "assistant", "content": fitted.chosen}],
        "rejected": [{"role": "assistant", "content": fitted.rejected}],
        "dropped_rounds": dropped,
    }

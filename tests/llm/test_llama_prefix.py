"""The in-process llama.cpp backend keeps the state of recurring system messages and restores it.

The unit tests drive `LoadedModel.prepare` with a fake context that records what is evaluated;
the last test runs the bundled SmolLM2 and checks that a restored prefix gives the same greedy
output as a cold call.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from personalign.llm.backends import llama_local
from personalign.llm.backends.llama_local import (
    MIN_PREFIX_TOKENS,
    LoadedModel,
    PrefixStates,
    common_prefix,
)
from personalign.llm.types import GenerateConfig
from tests.support.models import bundled_model_or_skip

# --- a fake llama.cpp context: one token per character -------------------------------------


@dataclass
class _Formatted:
    prompt: str
    added_special: bool = True


def _format(messages: Sequence[dict[str, str]]) -> _Formatted:
    text = "".join(f"<{m['role']}>{m['content']}</>" for m in messages)
    return _Formatted(text + "<assistant>")


class _State:
    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.scores = np.ones((len(tokens), 4), dtype=np.single)
        self.llama_state_size = 10 * len(tokens)


class FakeLlama:
    """Records evaluated tokens; `load_state` brings back exactly the saved tokens."""

    def __init__(self) -> None:
        self.input_ids = np.zeros(4096, dtype=np.intc)
        self.n_tokens = 0
        self.evaluated: list[int] = []
        self.batches: list[tuple[int, int]] = []  # (position of the first token, tokens) per eval
        self.loads = 0
        self._seed = 7

    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
        return list(text)

    def reset(self) -> None:
        self.n_tokens = 0

    def eval(self, tokens: Sequence[int]) -> None:
        self.batches.append((self.n_tokens, len(tokens)))
        self.input_ids[self.n_tokens : self.n_tokens + len(tokens)] = tokens
        self.n_tokens += len(tokens)
        self.evaluated.extend(tokens)

    def save_state(self) -> _State:
        return _State(self.input_ids[: self.n_tokens].tolist())

    def load_state(self, state: _State) -> None:
        self.input_ids[: len(state.tokens)] = state.tokens
        self.n_tokens = len(state.tokens)
        self.loads += 1
        self._seed = 99

    def complete(self, prompt: Sequence[int]) -> None:
        """What `create_chat_completion` does to the context: reuse the common prefix, evaluate the rest."""
        live = common_prefix(self.input_ids[: self.n_tokens].tolist(), prompt)
        self.n_tokens = live
        self.eval([*prompt[live:], 0, 0])  # and two generated tokens


def _loaded(capacity: int = 10**6) -> tuple[LoadedModel, FakeLlama]:
    llm = FakeLlama()
    return LoadedModel(
        llm=llm, lock=threading.Lock(), formatter=_format, prefixes=PrefixStates(capacity)
    ), llm


SYSTEM_A = "A" * (MIN_PREFIX_TOKENS + 40)
SYSTEM_B = "B" * (MIN_PREFIX_TOKENS + 60)


def _messages(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _run(model: LoadedModel, llm: FakeLlama, messages: list[dict[str, str]]) -> int:
    before = len(llm.evaluated)
    prompt, reused = model.prepare(messages)
    assert prompt is not None
    llm.complete(prompt)
    # What the backend reports as reused is exactly what was not evaluated for this prompt.
    assert len(llm.evaluated) - before - 2 == len(prompt) - reused
    return reused


def _prefix_len(system: str) -> int:
    """Tokens (characters) of the fake format up to where a user turn starts."""
    return len(f"<system>{system}</><")


def test_a_system_message_is_kept_from_its_second_call_and_restored_after() -> None:
    model, llm = _loaded()
    reused = []
    for i in range(4):  # alternate two templates so the live context never holds the prefix
        reused.append(_run(model, llm, _messages(SYSTEM_A, f"question {i}")))
        _run(model, llm, _messages(SYSTEM_B, f"other {i}"))
    assert model.stats.saved_prefixes == 2  # A and B, each at its second call
    # 1st call: evaluated from an empty context; 2nd: the same, and its state is kept; then restored.
    assert reused == [0, 0, _prefix_len(SYSTEM_A), _prefix_len(SYSTEM_A)]
    assert llm.loads == 4 and model.stats.restored_calls == 4
    assert llm._seed == 7  # a restore leaves the sampling seed chain alone


def test_consecutive_calls_of_one_template_keep_only_the_prefix_of_the_live_context() -> None:
    model, llm = _loaded()
    _run(model, llm, _messages(SYSTEM_A, "first"))
    # "fist" also shares "fi" with the previous prompt, but only the fixed prefix is kept, so
    # the rest is evaluated exactly as it would be after any other call.
    assert _run(model, llm, _messages(SYSTEM_A, "fist")) == _prefix_len(SYSTEM_A)
    assert llm.loads == 0 and model.stats.saved_prefixes == 0


def test_whatever_came_before_the_rest_of_a_prompt_is_evaluated_from_the_end_of_its_prefix() -> None:
    target = _messages(SYSTEM_A, "the question")
    k = _prefix_len(SYSTEM_A)
    for before in ([], [target], [_messages(SYSTEM_A, "the quest")], [_messages(SYSTEM_B, "x")],
                   [_messages(SYSTEM_A, "a"), _messages(SYSTEM_B, "b")],
                   [[{"role": "user", "content": SYSTEM_A}]]):  # fmt: skip
        model, llm = _loaded()
        for messages in before:
            _run(model, llm, messages)
        llm.batches.clear()
        _run(model, llm, target)
        # Either the prefix from position 0 and then the rest, or (prefix kept) just the rest.
        starts = [start for start, _ in llm.batches]
        assert starts in ([0, k], [k]), (before, starts)
        assert llm.input_ids[:k].tolist() == list(_format(target).prompt.encode()[:k])


def test_prompts_without_a_system_message_or_only_one_are_never_saved() -> None:
    model, llm = _loaded()
    for i in range(3):
        assert _run(model, llm, [{"role": "user", "content": SYSTEM_A + str(i)}]) == 0
        assert _run(model, llm, [{"role": "system", "content": SYSTEM_B + str(i)}]) == 0
    assert model.stats.saved_prefixes == 0 and not model.prefixes.states  # type: ignore[union-attr]


def test_short_system_messages_are_not_worth_a_state() -> None:
    model, llm = _loaded()
    for i in range(3):
        _run(model, llm, _messages("be brief", f"q{i}"))
        _run(model, llm, _messages(SYSTEM_B, f"q{i}"))
    assert [len(k) for k in model.prefixes.states] == [_prefix_len(SYSTEM_B)]  # type: ignore[union-attr]


def test_a_dialogue_keeps_everything_before_its_last_message() -> None:
    model, llm = _loaded()
    history = [{"role": "user", "content": SYSTEM_A}, {"role": "assistant", "content": "noted"}]
    for i in range(3):
        _run(model, llm, [*history, {"role": "user", "content": f"question {i}"}])
        _run(model, llm, _messages(SYSTEM_B, "x"))
    assert len(next(iter(model.prefixes.states))) == len(_format(history).prompt) - len("assistant>")  # type: ignore[union-attr]


def test_states_are_evicted_least_recently_used_first_within_the_byte_budget() -> None:
    states = PrefixStates(capacity_bytes=100)
    states.put([1], "one", 40)
    states.put([2], "two", 40)
    assert states.get([1]) == "one"  # now the most recently used
    states.put([3], "three", 40)
    assert states.get([2]) is None and states.get([1]) == "one" and states.get([3]) == "three"
    states.put([4], "too big", 101)
    assert states.get([4]) is None and states.size_bytes == 80


def test_seen_prefixes_are_remembered_within_a_bound() -> None:
    states = PrefixStates(capacity_bytes=100, max_seen=2)
    assert [states.seen_before(p) for p in ([1], [1], [2], [3], [1])] == [False, True, False, False, False]


def test_a_disabled_cache_evaluates_every_prefix_from_an_empty_context() -> None:
    model, llm = _loaded()
    model.prefixes = None
    for i in range(3):
        assert _run(model, llm, _messages(SYSTEM_A, f"q{i}")) == 0
        assert _run(model, llm, _messages(SYSTEM_B, f"q{i}")) == 0
    assert llm.loads == 0


# --- the real bundled model ---------------------------------------------------------------

INSTRUCTIONS = (
    "You label short product reviews for a small online bookshop. For every review decide "
    "whether the customer was satisfied, name the single aspect they talk about most (price, "
    "delivery, condition of the book, or the story itself), and quote the phrase that shows it. "
    "Answer in three lines: Satisfied: yes or no. Aspect: one word. Evidence: the quoted phrase. "
    "Example. Review: The parcel came two weeks late and the cover was torn. Satisfied: no. "
    "Aspect: delivery. Evidence: came two weeks late."
)
REVIEWS = [
    "Cheapest copy I could find anywhere, and it reads like new.",
    "The ending dragged on forever, I nearly gave up on it.",
    "Arrived the next morning, well packed in cardboard.",
]


@pytest.mark.integration
@pytest.mark.slow
def test_a_restored_prefix_gives_the_same_greedy_output_as_a_cold_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = bundled_model_or_skip()
    monkeypatch.setattr(llama_local, "_MODELS", {})
    monkeypatch.setenv("PERSONALIGN_LLAMA_N_CTX", "1024")
    from personalign.llm.spec import parse_model_spec
    from personalign.types import Message

    backend = llama_local.LlamaLocalBackend(parse_model_spec("local/smollm2"))
    model = llama_local.load_model(path, 1024)
    config = GenerateConfig(temperature=0.0, max_tokens=24)
    other = "You translate English into French word for word and keep the punctuation as it is. " * 2

    def ask(system: str, user: str) -> Any:
        return backend._call(
            [Message(role="system", content=system), Message(role="user", content=user)], config
        )

    kept = model.prefixes
    model.prefixes = None
    cold = []
    for review in REVIEWS:
        ask(other, review)  # the context holds another prompt, and no state is kept
        reply = ask(INSTRUCTIONS, f"Review: {review}")
        assert reply.usage.cached_prompt_tokens == 0
        cold.append(reply.text)

    model.prefixes = kept
    restored = []  # seen, seen again and kept, then restored
    for review in REVIEWS:
        ask(other, review)  # in between, so the prefix can only come from a kept state
        restored.append(ask(INSTRUCTIONS, f"Review: {review}"))
    consecutive = [ask(INSTRUCTIONS, f"Review: {review}") for review in REVIEWS]  # the live prefix

    assert all(len(text) > 20 for text in cold)
    assert [r.text for r in restored] == cold
    assert [r.text for r in consecutive] == cold
    assert model.stats.saved_prefixes == 2 and model.stats.restored_calls == 2 * (len(REVIEWS) - 2)
    prefix = max(len(key) for key in model.prefixes.states)  # type: ignore[union-attr]  # INSTRUCTIONS
    assert [r.usage.cached_prompt_tokens for r in restored] == [0, 0] + [prefix] * (len(REVIEWS) - 2)
    assert [r.usage.cached_prompt_tokens for r in consecutive] == [prefix] * len(REVIEWS)
    assert all(r.usage.cached_prompt_tokens < r.usage.prompt_tokens for r in restored + consecutive)

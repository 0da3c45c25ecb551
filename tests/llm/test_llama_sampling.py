"""Greedy schema-constrained decoding checks the argmax against the grammar first, and its replies
are token for token those of llama-cpp-python's whole-vocabulary chain."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from personalign.llm.backends.llama_sampling import check_first_applies, first_max
from tests.support.models import bundled_model_or_skip

NEUTRAL: dict[str, Any] = {
    "grammar": object(),
    "temp": 0.0,
    "repeat_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "mirostat_mode": 0,
    "logits_processor": None,
}


def test_the_check_first_path_applies_only_to_neutral_greedy_decoding_under_a_grammar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check_first_applies(**NEUTRAL)
    for name, value in [
        ("grammar", None),
        ("temp", 0.7),
        ("repeat_penalty", 1.1),
        ("frequency_penalty", 0.5),
        ("presence_penalty", 0.5),
        ("mirostat_mode", 2),
        ("logits_processor", [lambda ids, logits: logits]),  # how logit_bias reaches the sampler
    ]:
        assert not check_first_applies(**{**NEUTRAL, name: value}), name
    monkeypatch.setenv("PERSONALIGN_LLAMA_GRAMMAR_CHECK_FIRST", "0")
    assert not check_first_applies(**NEUTRAL)


def test_ties_go_to_the_lowest_token_id_as_in_llama_cpps_greedy_sampler() -> None:
    logits = np.array([0.5, 2.0, -1.0, 2.0, 2.0], dtype=np.single)
    assert first_max(logits) == 1
    logits[1] = -np.inf  # the grammar rejected it: the next of the tied maxima wins
    assert first_max(logits) == 3


LABELS = ["Fully Covered", "Partially Covered", "Not Covered"]
SCHEMAS: list[dict[str, Any]] = [
    {  # the matcher's shape: enums, a bounded string, a fixed-length array
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "index": {"type": "integer", "enum": [1, 2, 3]},
                        "reasoning": {"type": "string", "maxLength": 80},
                        "label": {"type": "string", "enum": LABELS},
                    },
                    "required": ["index", "reasoning", "label"],
                },
                "minItems": 3,
                "maxItems": 3,
            }
        },
        "required": ["results"],
    },
    {
        "type": "object",
        "properties": {"score": {"type": "integer", "enum": list(range(1, 11))}, "why": {"type": "string"}},
        "required": ["score", "why"],
    },
]
PROMPTS = [
    "Label each item as Fully Covered, Partially Covered or Not Covered. Preference: short emails. "
    "1. Is it short? 2. Is it polite? 3. Does it greet? Answer in JSON.",
    "Rate this haiku from 1 to 10 and say why, in JSON: 'An old silent pond, a frog jumps in, splash.'",
]


@pytest.mark.integration
@pytest.mark.slow
def test_check_first_gives_the_whole_vocabulary_chains_replies_token_for_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = bundled_model_or_skip()
    from personalign.llm.backends.llama_sampling import fast_llama_class

    llm = fast_llama_class()(model_path=str(path), n_ctx=1024, n_threads=1, n_threads_batch=1, verbose=False)
    try:
        replies: dict[str, list[str]] = {"1": [], "0": []}
        for switch in ("0", "1"):
            monkeypatch.setenv("PERSONALIGN_LLAMA_GRAMMAR_CHECK_FIRST", switch)
            for schema in SCHEMAS:
                for prompt in PROMPTS:
                    llm.reset()
                    out = llm.create_chat_completion(
                        messages=[{"role": "user", "content": prompt}],
                        temperature=0.0,
                        max_tokens=48,
                        response_format={"type": "json_object", "schema": schema},
                    )
                    replies[switch].append(out["choices"][0]["message"]["content"])
        assert replies["1"] == replies["0"]
        assert all(len(text) > 10 for text in replies["1"])
        stats = llm.grammar_stats
        # Both paths ran: most tokens passed the one-token check, some needed the full mask.
        assert 0 < stats.full_passes < stats.tokens
    finally:
        llm.close()

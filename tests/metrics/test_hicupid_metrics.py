from __future__ import annotations

import logging
import math

import pytest

from personalign.benchmarks.hicupid.metrics import (
    bleu,
    paper_total,
    retrieval_total,
    rouge_l,
    total_from_types,
    wtl,
)
from personalign.metrics.agreement import cohen_kappa


@pytest.mark.parametrize(
    ("persona", "schedule", "multi", "total"),
    [
        # Rows of the paper's Table 3 (Test Set 1): per-type scores -> reported Total.
        (44.7, 8.8, 10.8, 30.4),  # GPT-4o-mini 0-shot, Llama-3.2 judge
        (42.1, 9.5, 4.4, 28.0),  # GPT-4o-mini 0-shot, GPT-4o judge
        (49.1, 98.6, 14.5, 44.8),  # Llama-3.1-8B SFT+DPO, GPT-4o judge
        (27.6, 99.8, 15.1, 31.6),  # Mistral-7B SFT, GPT-4o judge
        (36.6, 0.0, 8.8, 24.0),  # Qwen-2.5-7B DPO, GPT-4o judge
        (29.7, 84.3, 2.3, 29.4),  # Llama-3.1-8B BM25, GPT-4o judge
    ],
)
def test_total_reproduces_the_papers_table_3(
    persona: float, schedule: float, multi: float, total: float
) -> None:
    assert paper_total(persona, schedule, multi) == pytest.approx(total, abs=0.06)


def test_total_from_types_needs_every_type() -> None:
    assert total_from_types({"persona": 0.4, "schedule": 0.2, "profile": 0.1}) == pytest.approx(
        (25 * 0.4 + 10 * 0.1 + 5 * 0.1) / 40
    )
    assert total_from_types({"persona": 0.4, "schedule": 0.2}) is None


@pytest.mark.parametrize(
    ("persona", "schedule", "mi_persona", "mi_profile", "total"),
    [
        # Rows of the paper's Table A2 (retrieval Hit@k).
        (42.4, 93.3, 34.5, 8.6, 52.5),  # dialogue, k=1
        (65.4, 100.0, 57.1, 27.1, 71.1),  # dialogue, k=5
        (72.7, 100.0, 63.8, 46.4, 77.3),  # utterance, k=15 (k=25 gives 86.17 for a printed 86.1)
    ],
)
def test_retrieval_total_reproduces_table_a2(
    persona: float, schedule: float, mi_persona: float, mi_profile: float, total: float
) -> None:
    assert retrieval_total(persona, schedule, mi_persona, mi_profile) == pytest.approx(total, abs=0.06)


def test_wtl_rates() -> None:
    assert wtl(["win", "tie", "tie", "loss"]) == {"win": 0.25, "tie": 0.5, "loss": 0.25}
    assert wtl([]) == {"win": 0.0, "tie": 0.0, "loss": 0.0}


def test_bleu_and_rouge_l() -> None:
    ref = "You have a dentist appointment then; should I move the call to 11:00?"
    assert bleu(ref, ref) == pytest.approx(1.0)
    assert rouge_l(ref, ref) == pytest.approx(1.0)
    partial = "You have a dentist appointment then."
    assert 0.0 < bleu(partial, ref) < 1.0
    # ROUGE-L F1 by hand: LCS 6 tokens ("you have a dentist appointment then"), P 6/6, R 6/14.
    assert rouge_l(partial, ref) == pytest.approx(2 * 1.0 * (6 / 14) / (1.0 + 6 / 14))
    assert bleu("", ref) == 0.0 and rouge_l("completely unrelated words", ref) == 0.0


def test_cohen_kappa_by_hand() -> None:
    a = ["win", "win", "loss", "tie", "loss", "win"]
    b = ["win", "loss", "loss", "tie", "loss", "win"]
    # p_o = 5/6; p_e = (3*2 + 2*3 + 1*1) / 36 = 13/36
    result = cohen_kappa(a, b)
    assert result.agreement == pytest.approx(5 / 6)
    assert result.kappa == pytest.approx((5 / 6 - 13 / 36) / (1 - 13 / 36))
    assert cohen_kappa(["x", "x"], ["x", "x"]).kappa is None  # undefined, not 1 or 0
    assert cohen_kappa([], []).n == 0
    assert cohen_kappa(["a", "b"], ["b", "a"]).kappa == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        cohen_kappa(["a"], [])


def test_bleu_exact_values_by_hand() -> None:
    """Sentence BLEU, 4-gram, 13a tokens, add-one smoothing of orders 2-4, brevity penalty."""
    ref = "the cat sat on a mat."
    # 13a splits off the final period: 7 tokens each. Clipped matches: 1-grams 6/7, 2-grams 4/6,
    # 3-grams 2/5, 4-grams 1/4; add-one on orders 2-4 gives 6/7 * 5/7 * 3/6 * 2/5 = 6/49.
    assert bleu("the cat sat on the mat.", ref) == pytest.approx((6 / 49) ** 0.25)
    # Shorter than the reference (4 tokens for 7): 4/4, 2/3 -> 3/4, 1/2 -> 2/3, 0/1 -> 1/2, times
    # the brevity penalty exp(1 - 7/4).
    shorter = bleu("the cat sat.", "the cat sat on the mat.")
    assert shorter == pytest.approx(math.exp(1 - 7 / 4) * 0.25**0.25)
    # A two-token answer: orders 3 and 4 have no n-grams, and add-one makes each 1/1.
    assert bleu("hello there", "hello there friend") == pytest.approx(math.exp(1 - 3 / 2) * (2 / 2) ** 0.25)


def test_bleu_logs_no_warning_per_sentence(caplog: pytest.LogCaptureFixture) -> None:
    # With add-one smoothing every order has n-grams, so effective order cannot change a score;
    # without it sacrebleu warns on every sentence, which would flood a run's log.
    with caplog.at_level(logging.WARNING):
        bleu("a short answer", "a short reference answer")
    assert caplog.records == []


def test_total_from_types_is_none_when_any_one_type_is_missing() -> None:
    full = {"persona": 0.4, "schedule": 0.2, "profile": 0.1}
    for missing in full:
        assert total_from_types({k: v for k, v in full.items() if k != missing}) is None
        assert total_from_types({**full, missing: None}) is None


def test_cohen_kappa_with_a_label_only_one_rater_used() -> None:
    # p_o = 2/4; rater b never says "tie": p_e = (2*2 + 1*2 + 1*0) / 16 = 6/16
    result = cohen_kappa(["win", "win", "loss", "tie"], ["win", "loss", "loss", "win"])
    assert result.n == 4 and result.agreement == pytest.approx(0.5)
    assert result.kappa == pytest.approx((0.5 - 6 / 16) / (1 - 6 / 16))
    assert result.to_record() == {"n": 4, "agreement": 0.5, "kappa": result.kappa}


def test_cohen_kappa_undefined_keeps_n_and_agreement() -> None:
    result = cohen_kappa(["x", "x", "x"], ["x", "x", "x"])
    assert (result.n, result.agreement, result.kappa) == (3, 1.0, None)
    with pytest.raises(ValueError, match=r"rater label lists differ in length \(2 vs 1\)"):
        cohen_kappa(["a", "b"], ["a"])

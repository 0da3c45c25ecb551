"""HiCUPID metrics: the S score, the paper's weighted totals, W/T/L rates, BLEU and ROUGE-L.

Per question: win 1, tie 0.5, loss 0 (persona and multi-info); YES 1, NO 0 (schedule).
S = mean score x 100 = win rate + 0.5 x tie rate. Totals follow the paper: schedule is halved
(a perfect reference answer scores 50 on the A/B scale but 100 on YES/NO), and the question
types are weighted by their counts per user (25 persona, 10 schedule, 5 multi-info).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

TYPE_WEIGHTS = {"persona": 25, "schedule": 10, "profile": 5}


def paper_total(persona: float, schedule: float, multi_info: float) -> float:
    """Total = (25 x persona + 10 x schedule / 2 + 5 x multi-info) / 40 (the paper's Tables 3/4)."""
    return (25 * persona + 10 * (schedule / 2) + 5 * multi_info) / 40


def retrieval_total(persona: float, schedule: float, multi_persona: float, multi_profile: float) -> float:
    """The paper's Table A2 total: (25 x persona + 10 x schedule + 5 x mean(multi hits)) / 40."""
    return (25 * persona + 10 * schedule + 5 * (multi_persona + multi_profile) / 2) / 40


def total_from_types(scores: Mapping[str, float | None]) -> float | None:
    """`paper_total` from per-type scores keyed persona / schedule / profile; None if one is missing."""
    p, s, m = scores.get("persona"), scores.get("schedule"), scores.get("profile")
    if p is None or s is None or m is None:
        return None
    return paper_total(p, s, m)


def wtl(outcomes: Sequence[str]) -> dict[str, float]:
    """Win / tie / loss rates (schedule: YES counts as a win and NO as a loss)."""
    n = len(outcomes)
    if not n:
        return {"win": 0.0, "tie": 0.0, "loss": 0.0}
    return {k: sum(1 for o in outcomes if o == k) / n for k in ("win", "tie", "loss")}


@cache
def _bleu() -> Any:
    from sacrebleu.metrics.bleu import BLEU

    # 4-gram, 13a tokenizer, add-one smoothing of the higher orders (Lin & Och 2004), as in the
    # original's `evaluate` BLEU with smooth=True; effective order for very short answers.
    return BLEU(smooth_method="add-k", smooth_value=1, effective_order=True, tokenize="13a")


@cache
def _rouge() -> Any:
    from rouge_score.rouge_scorer import RougeScorer

    return RougeScorer(["rougeL"], use_stemmer=False)


def bleu(prediction: str, reference: str) -> float:
    """Sentence BLEU in [0, 1]."""
    if not prediction.strip():
        return 0.0
    return float(_bleu().sentence_score(prediction, [reference]).score) / 100.0


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure in [0, 1] (no stemming, as the original's defaults)."""
    # rouge-score logs through the root logger, which makes logging configure a stderr handler
    # (and then print other libraries' debug records); leave the root logger as it was.
    handlers, level = list(logging.root.handlers), logging.root.level
    try:
        return float(_rouge().score(reference, prediction)["rougeL"].fmeasure)
    finally:
        logging.root.handlers, logging.root.level = handlers, level

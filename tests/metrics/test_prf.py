"""Pooled (micro) CUPID precision / recall / F1, bootstrap CIs, and the CUPID run summary."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from personalign.benchmarks.cupid.steps import summarize
from personalign.metrics import MatchCounts, instance_prf, pooled_prf
from personalign.metrics.bootstrap import resample_sums
from personalign.metrics.prf import _pooled_columns
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult

A = MatchCounts(n_pred=2, matched_pred=1.5, n_gold=3, matched_gold=2)
B = MatchCounts(n_pred=4, matched_pred=1, n_gold=2, matched_gold=0.5)
EMPTY = MatchCounts(n_pred=0, matched_pred=0, n_gold=3, matched_gold=0)
ZERO = MatchCounts(n_pred=0, matched_pred=0, n_gold=0, matched_gold=0)


def test_pooled_two_instances_hand_computed() -> None:
    prf = pooled_prf([A, B], ci=False)
    # P = (1.5 + 1) / (2 + 4) = 5/12; R = (2 + 0.5) / (3 + 2) = 1/2; F1 = 2PR/(P+R) = 5/11
    assert prf.precision == pytest.approx(5 / 12)
    assert prf.recall == pytest.approx(1 / 2)
    assert prf.f1 == pytest.approx(5 / 11)
    assert (prf.n_instances, prf.n_pred, prf.n_gold) == (2, 6, 5)
    assert prf.matched_pred == pytest.approx(2.5)
    assert prf.matched_gold == pytest.approx(2.5)


def test_pooled_is_order_independent() -> None:
    assert pooled_prf([A, B, EMPTY], ci=False).f1 == pytest.approx(pooled_prf([EMPTY, B, A], ci=False).f1)


def test_empty_inference_counts_only_in_recall_denominator() -> None:
    prf = pooled_prf([A, EMPTY], ci=False)
    # P = 1.5 / 2 = 3/4 (unchanged by EMPTY); R = 2 / (3 + 3) = 1/3; F1 = 2*(3/4)*(1/3)/(3/4+1/3) = 6/13
    assert prf.precision == pytest.approx(3 / 4)
    assert prf.recall == pytest.approx(1 / 3)
    assert prf.f1 == pytest.approx(6 / 13)


def test_single_instance_prf() -> None:
    prf = instance_prf(A)
    assert prf.precision == pytest.approx(0.75)
    assert prf.recall == pytest.approx(2 / 3)
    # 2 * 0.75 * (2/3) / (0.75 + 2/3) = 1 / (17/12) = 12/17
    assert prf.f1 == pytest.approx(12 / 17)
    assert prf.precision_ci is None


def test_no_instance_is_not_a_measured_zero() -> None:
    prf = pooled_prf([])
    assert (prf.precision, prf.recall, prf.f1, prf.n_instances) == (None, None, None, 0)
    assert prf.precision_ci is None


@pytest.mark.parametrize("counts", [[ZERO], [ZERO, ZERO, ZERO], [EMPTY]])
def test_all_empty_is_zero_without_division_errors(counts: list[MatchCounts]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prf = pooled_prf(counts, n_resamples=200)
    assert (prf.precision, prf.recall, prf.f1) == (0.0, 0.0, 0.0)
    if len(counts) >= 2:
        assert prf.precision_ci == (0.0, 0.0)
        assert prf.f1_ci == (0.0, 0.0)


def test_perfect_scores() -> None:
    perfect = MatchCounts(n_pred=3, matched_pred=3, n_gold=2, matched_gold=2)
    prf = pooled_prf([perfect, perfect], n_resamples=200)
    assert (prf.precision, prf.recall, prf.f1) == (1.0, 1.0, 1.0)
    assert prf.f1_ci == (1.0, 1.0)


def test_micro_differs_from_macro() -> None:
    small_hit = MatchCounts(n_pred=1, matched_pred=1, n_gold=1, matched_gold=1)
    big_miss = MatchCounts(n_pred=9, matched_pred=0, n_gold=9, matched_gold=0)
    micro = pooled_prf([small_hit, big_miss], ci=False)
    macro_precision = sum(instance_prf(c).precision for c in (small_hit, big_miss)) / 2
    assert micro.precision == pytest.approx(1 / 10)
    assert micro.recall == pytest.approx(1 / 10)
    assert macro_precision == pytest.approx(1 / 2)


def varied_counts() -> list[MatchCounts]:
    return [
        MatchCounts(n_pred=2, matched_pred=1.5, n_gold=3, matched_gold=2),
        MatchCounts(n_pred=4, matched_pred=1, n_gold=2, matched_gold=0.5),
        MatchCounts(n_pred=3, matched_pred=0, n_gold=4, matched_gold=1),
        MatchCounts(n_pred=1, matched_pred=1, n_gold=2, matched_gold=2),
        MatchCounts(n_pred=3, matched_pred=2.5, n_gold=3, matched_gold=1.5),
        MatchCounts(n_pred=2, matched_pred=0.5, n_gold=4, matched_gold=0),
    ]


def test_ci_contains_point_estimate() -> None:
    prf = pooled_prf(varied_counts(), n_resamples=1000)
    for value, ci in ((prf.precision, prf.precision_ci), (prf.recall, prf.recall_ci), (prf.f1, prf.f1_ci)):
        assert ci is not None
        lo, hi = ci
        assert 0.0 <= lo < value < hi <= 1.0


def test_ci_none_for_one_instance_or_when_disabled() -> None:
    one = pooled_prf([A])
    assert (one.precision_ci, one.recall_ci, one.f1_ci) == (None, None, None)
    off = pooled_prf(varied_counts(), ci=False)
    assert (off.precision_ci, off.recall_ci, off.f1_ci) == (None, None, None)


def test_ci_reproducible_for_same_seed() -> None:
    first = pooled_prf(varied_counts(), seed=7, n_resamples=500)
    second = pooled_prf(varied_counts(), seed=7, n_resamples=500)
    assert first.precision_ci == second.precision_ci
    assert first.recall_ci == second.recall_ci
    assert first.f1_ci == second.f1_ci


def test_ci_narrows_as_data_grows() -> None:
    pattern = [A, B]
    small = pooled_prf(pattern * 5, n_resamples=500)
    large = pooled_prf(pattern * 500, n_resamples=500)
    # same point estimate, since the instances are repeated
    assert small.f1 == pytest.approx(large.f1)
    for s_ci, l_ci in ((small.precision_ci, large.precision_ci), (small.recall_ci, large.recall_ci)):
        assert s_ci is not None and l_ci is not None
        small_width = s_ci[1] - s_ci[0]
        large_width = l_ci[1] - l_ci[0]
        assert large_width > 0
        # width shrinks like 1/sqrt(n): 100x the data should give roughly a tenth of the width
        assert large_width < small_width / 4


def test_to_record_is_plain_dict() -> None:
    record = pooled_prf([A, B], ci=False).to_record()
    assert record["precision"] == pytest.approx(5 / 12)
    assert record["n_instances"] == 2
    assert record["f1_ci"] is None


# --- benchmarks.cupid.summarize ---------------------------------------------------------------


def inference_ok(counts: MatchCounts, preference: str = "Some preference.") -> TaskResult:
    return TaskResult(
        status="ok",
        scores={
            "n_pred": counts.n_pred,
            "matched_pred": counts.matched_pred,
            "n_gold": counts.n_gold,
            "matched_gold": counts.matched_gold,
            "inferred_preference": preference,
        },
    )


def generation_ok(score: int) -> TaskResult:
    return TaskResult(status="ok", scores={"score": score, "label": "Good"})


def record(
    instance_id: str,
    instance_type: str,
    results: dict[str, TaskResult],
    flags: dict[str, list[str]] | None = None,
) -> InstanceRecord:
    steps = {name: StepRecord(role="matcher", flags=f) for name, f in (flags or {}).items()}
    return InstanceRecord(
        instance_id=instance_id,
        meta={"persona_id": instance_id.split("#")[0], "instance_type": instance_type},
        steps=steps,
        results=results,
    )


def summary_records() -> list[InstanceRecord]:
    boom = TaskResult(
        status="error",
        error="matcher: unparseable output",
        # scores that would change every metric if errors were (wrongly) included
        scores={"n_pred": 10, "matched_pred": 0, "n_gold": 10, "matched_gold": 0, "score": 1},
    )
    return [
        record(
            "p1#consistent",
            "consistent",
            {"inference": inference_ok(A), "generation": generation_ok(8)},
            {"decompose": ["reask"]},
        ),
        record("p2#consistent", "consistent", {"inference": inference_ok(B), "generation": generation_ok(5)}),
        record(
            "p1#contrastive",
            "contrastive",
            {"inference": inference_ok(EMPTY, preference=""), "generation": generation_ok(3)},
            {
                "decompose": ["empty_inference"],
                "match/inferred->gold": ["empty_inference"],
                "match/gold->inferred": ["empty_inference"],
            },
        ),
        record(
            "p1#changing",
            "changing",
            {
                "inference": inference_ok(MatchCounts(n_pred=3, matched_pred=3, n_gold=3, matched_gold=1.5)),
                "generation": TaskResult(status="error", error="judge: model call failed"),
            },
        ),
        record("p2#changing", "changing", {"inference": boom, "generation": boom}),
    ]


def test_summarize_inference_pooled_and_by_type() -> None:
    summary = summarize(summary_records(), ["inference"])
    assert summary["n_instances"] == 5
    block = summary["inference"]
    assert block["n_scored"] == 4
    assert block["n_errors"] == 1
    assert block["errors"] == {"p2#changing": "matcher: unparseable output"}

    overall = block["all"]
    # pred: (1.5 + 1 + 0 + 3) / (2 + 4 + 0 + 3) = 11/18; gold: (2 + 0.5 + 0 + 1.5) / (3 + 2 + 3 + 3) = 4/11
    assert overall["precision"] == pytest.approx(11 / 18)
    assert overall["recall"] == pytest.approx(4 / 11)
    assert overall["f1"] == pytest.approx(88 / 193)
    assert overall["n_instances"] == 4
    assert overall["precision_ci"] is not None

    by_type = block["by_type"]
    assert set(by_type) == {"consistent", "contrastive", "changing"}
    assert by_type["consistent"]["precision"] == pytest.approx(5 / 12)
    assert by_type["consistent"]["recall"] == pytest.approx(1 / 2)
    assert by_type["consistent"]["f1"] == pytest.approx(5 / 11)
    assert (by_type["contrastive"]["precision"], by_type["contrastive"]["recall"]) == (0.0, 0.0)
    assert by_type["contrastive"]["n_gold"] == 3
    changing = by_type["changing"]
    assert changing["n_instances"] == 1
    assert (changing["precision"], changing["recall"]) == (pytest.approx(1.0), pytest.approx(0.5))
    assert changing["f1"] == pytest.approx(2 / 3)
    assert changing["precision_ci"] is None

    assert block["empty_inferences"] == 1
    assert block["flags"] == {"empty_inference": 3, "reask": 1}


def test_summarize_generation_mean_per_type() -> None:
    summary = summarize(summary_records(), ["inference", "generation"])
    block = summary["generation"]
    assert block["n_scored"] == 3
    assert block["n_errors"] == 2
    assert set(block["errors"]) == {"p1#changing", "p2#changing"}
    assert block["all"]["mean"] == pytest.approx((8 + 5 + 3) / 3)
    assert block["all"]["n"] == 3
    lo, hi = block["all"]["ci"]
    assert 3 <= lo <= (8 + 5 + 3) / 3 <= hi <= 8
    by_type: dict[str, Any] = block["by_type"]
    # both changing instances errored: the type is there, with no value ("n/a"), not a 0
    assert set(by_type) == {"consistent", "contrastive", "changing"}
    assert by_type["changing"] == {"mean": None, "ci": None, "n": 0}
    assert by_type["consistent"]["mean"] == pytest.approx(6.5)
    assert by_type["consistent"]["n"] == 2
    assert by_type["contrastive"] == {"mean": pytest.approx(3.0), "ci": None, "n": 1}


def test_summarize_ignores_tasks_a_record_lacks_and_handles_no_records() -> None:
    only_inference = [record("p9#consistent", "consistent", {"inference": inference_ok(A)})]
    summary = summarize(only_inference, ["inference", "generation"])
    assert summary["generation"]["n_scored"] == 0
    assert summary["generation"]["n_errors"] == 0
    assert summary["generation"]["all"] == {"mean": None, "ci": None, "n": 0}
    assert summary["generation"]["by_type"] == {}

    empty = summarize([], ["inference"])
    assert empty["n_instances"] == 0
    assert empty["inference"]["all"]["f1"] is None  # nothing measured, not 0
    assert empty["inference"]["by_type"] == {}
    assert empty["inference"]["empty_inferences"] == 0


def test_pooled_columns_by_hand_without_warnings() -> None:
    # columns: n_pred, matched_pred, n_gold, matched_gold
    sums = np.array([[4, 1, 2, 1], [0, 0, 0, 0], [1, 1, 1, 0.5], [2, 0, 3, 3]], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prf = _pooled_columns(sums)
    expected = [[0.25, 0.5, 1 / 3], [0.0, 0.0, 0.0], [1.0, 0.5, 2 / 3], [0.0, 1.0, 0.0]]
    assert prf == pytest.approx(np.array(expected))


def test_pooled_prf_ci_defaults_are_seed_0_and_2000_resamples() -> None:
    assert pooled_prf(varied_counts()) == pooled_prf(varied_counts(), seed=0, n_resamples=2000)
    assert pooled_prf(varied_counts()) != pooled_prf(varied_counts(), seed=1)


def test_pooled_prf_cis_are_the_percentiles_of_each_metric() -> None:
    counts = varied_counts() * 3
    table = np.array([[c.n_pred, c.matched_pred, c.n_gold, c.matched_gold] for c in counts], dtype=float)
    resampled = _pooled_columns(resample_sums(table, 500, 3))
    prf = pooled_prf(counts, seed=3, n_resamples=500)
    for k, ci in enumerate((prf.precision_ci, prf.recall_ci, prf.f1_ci)):
        lo, hi = np.quantile(resampled[:, k], [0.025, 0.975])
        assert ci == (float(lo), float(hi))
    assert len({prf.precision_ci, prf.recall_ci, prf.f1_ci}) == 3

"""MR / AAR / selectivity arithmetic on hand-built judgements."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from personalign.benchmarks.benchpres.metrics import (
    Judgement,
    _ci,
    _stats_from_sums,
    breakdown,
    harmonic_selectivity,
    per_sample_rates,
    selectivity_scores,
)


def j(
    row: str, label: bool, applied: bool, sample: int = 0, domain: str = "health", category: str = "tone"
) -> Judgement:
    return Judgement(row, sample, domain, category, label, applied)


def test_mr_and_aar_count_only_their_own_labels() -> None:
    items = [
        j("r1", False, True),  # misapplied
        j("r1", False, False),  # suppressed correctly
        j("r1", True, True),  # applied correctly
        j("r2", False, False),
        j("r2", True, False),  # appropriate but not applied
        j("r2", True, True),
    ]
    scores = selectivity_scores(items, ci=False)
    assert scores.mr == pytest.approx(1 / 3)
    assert scores.aar == pytest.approx(2 / 3)
    assert scores.gap == pytest.approx(1 / 3)
    assert (scores.n_suppress, scores.n_apply, scores.n_rows, scores.n_samples) == (3, 3, 2, 1)
    # harmonic mean of AAR = 2/3 and 1 - MR = 2/3
    assert scores.selectivity == pytest.approx(2 / 3)


def test_official_denominators_663_apply_and_1287_suppress() -> None:
    # 390 rows x 5 attributes; 663 apply labels and 1,287 suppress labels, as in the paper.
    labels = [True] * 663 + [False] * 1287
    items = []
    for k, label in enumerate(labels):
        row = f"row{k // 5}"
        # apply the first 500 appropriate and the first 700 inappropriate preferences
        applied = (k < 500) if label else (k - 663 < 700)
        items.append(j(row, label, applied))
    scores = selectivity_scores(items, ci=False)
    assert scores.n_apply == 663 and scores.n_suppress == 1287 and scores.n_rows == 390
    assert scores.aar == pytest.approx(500 / 663)
    assert scores.mr == pytest.approx(700 / 1287)


def test_rates_are_pooled_per_sample_then_averaged_over_samples() -> None:
    items = [
        # sample 0: MR 1/1, AAR 0/1
        j("r1", False, True, sample=0),
        j("r1", True, False, sample=0),
        # sample 1: MR 1/3, AAR 2/2 (a different denominator: one row's judgement errored)
        j("r1", False, False, sample=1),
        j("r1", True, True, sample=1),
        j("r2", False, True, sample=1),
        j("r2", False, False, sample=1),
        j("r2", True, True, sample=1),
    ]
    rates = per_sample_rates(items)
    assert rates[0]["mr"] == 1.0 and rates[0]["aar"] == 0.0
    assert rates[1]["mr"] == pytest.approx(1 / 3) and rates[1]["aar"] == 1.0
    scores = selectivity_scores(items, ci=False)
    assert scores.mr == pytest.approx((1.0 + 1 / 3) / 2)  # not the pooled 2/4
    assert scores.aar == pytest.approx(0.5)  # not the pooled 2/3
    assert scores.n_samples == 2 and [s["sample"] for s in scores.per_sample] == [0, 1]


def test_selectivity_is_harmonic_mean_of_aar_and_one_minus_mr() -> None:
    assert harmonic_selectivity(0.0, 1.0) == 1.0
    assert harmonic_selectivity(1.0, 1.0) == 0.0
    assert harmonic_selectivity(0.5, 0.5) == pytest.approx(0.5)
    assert harmonic_selectivity(0.2, 0.6) == pytest.approx(2 * 0.6 * 0.8 / 1.4)
    assert harmonic_selectivity(None, 0.5) is None


def test_missing_label_kind_gives_undefined_rate_not_zero() -> None:
    scores = selectivity_scores([j("r1", False, True), j("r2", False, False)], ci=False)
    assert scores.mr == 0.5
    assert scores.aar is None and scores.selectivity is None and scores.gap is None


def test_bootstrap_ci_brackets_the_estimate_and_is_reproducible() -> None:
    items = [j(f"r{k}", k % 3 == 0, k % 2 == 0, sample=s) for k in range(40) for s in range(2)]
    a = selectivity_scores(items, seed=1)
    b = selectivity_scores(items, seed=1)
    assert a.mr_ci == b.mr_ci and a.mr_ci is not None and a.aar_ci is not None
    assert a.mr_ci[0] <= a.mr <= a.mr_ci[1]  # type: ignore[operator]
    assert a.aar_ci[0] <= a.aar <= a.aar_ci[1]  # type: ignore[operator]
    assert a.selectivity_ci is not None
    identical = [j(f"r{k}", k % 2 == 0, True) for k in range(10)]
    flat = selectivity_scores(identical)
    assert flat.mr_ci == (1.0, 1.0) and flat.aar_ci == (1.0, 1.0)


def test_breakdown_groups_by_key() -> None:
    items = [
        j("r1", False, True, domain="health", category="role"),
        j("r1", True, True, domain="health", category="style"),
        j("r2", False, False, domain="housing", category="role"),
    ]
    by_domain = breakdown(items, lambda x: x.domain)
    assert set(by_domain) == {"health", "housing"}
    assert by_domain["health"]["mr"] == 1.0 and by_domain["housing"]["mr"] == 0.0
    by_category = breakdown(items, lambda x: x.category)
    assert by_category["role"]["mr"] == 0.5 and by_category["role"]["aar"] is None
    assert by_category["style"]["aar"] == 1.0


def test_selectivity_ci_uses_one_minus_mr() -> None:
    # Identical rows: every resample has MR 1/4 and AAR 1/2, so the CI collapses onto the
    # estimate 2 * 0.5 * 0.75 / 1.25 = 0.6 (from MR instead of 1 - MR it would be 1/3).
    items = []
    for k in range(6):
        items += [j(f"r{k}", False, True)] + [j(f"r{k}", False, False)] * 3
        items += [j(f"r{k}", True, True), j(f"r{k}", True, False)]
    scores = selectivity_scores(items, n_resamples=50)
    assert scores.selectivity == pytest.approx(0.6)
    assert scores.selectivity_ci == (pytest.approx(0.6), pytest.approx(0.6))
    assert scores.mr_ci == (pytest.approx(0.25), pytest.approx(0.25))
    assert scores.aar_ci == (pytest.approx(0.5), pytest.approx(0.5))


def test_breakdown_passes_its_seed_to_the_bootstrap() -> None:
    items = [j(f"r{k}", k % 3 == 0, k % 2 == 0, domain="health") for k in range(30)]
    for seed in (0, 5):
        group = breakdown(items, lambda x: x.domain, seed=seed)["health"]
        assert group == selectivity_scores(items, seed=seed).to_record()
    assert breakdown(items, lambda x: x.domain)["health"]["mr_ci"] == selectivity_scores(items).mr_ci
    assert breakdown(items, lambda x: x.domain, seed=5)["health"]["mr_ci"] != selectivity_scores(items).mr_ci


def test_stats_from_resampled_sums_by_hand() -> None:
    # columns per sample: misapplied, suppress, applied, apply; two samples, three resamples
    sums = np.array(
        [
            [1, 4, 0, 2, 1, 1, 1, 1],  # MR (1/4, 1/1), AAR (0/2, 1/1)
            [2, 2, 0, 1, 1, 1, 0, 1],  # MR 1 and AAR 0 everywhere: selectivity 0, not 0/0
            [0, 1, 1, 1, 0, 1, 1, 1],  # perfect
        ],
        dtype=float,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = _stats_from_sums(sums, 2)
    keep, aar = 1 - 0.625, 0.5
    expected = [[0.625, 0.5, 2 * aar * keep / (aar + keep)], [1.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    assert stats == pytest.approx(np.array(expected))


@pytest.mark.parametrize(
    ("sums", "expected"),
    [
        # no suppress labels at all: MR undefined, selectivity 0 (reported as None upstream)
        ([[0, 0, 1, 2], [0, 0, 2, 2]], [[np.nan, 0.5, 0.0], [np.nan, 1.0, 0.0]]),
        # no apply labels at all: AAR undefined
        ([[1, 2, 0, 0], [0, 2, 0, 0]], [[0.5, np.nan, 0.0], [0.0, np.nan, 0.0]]),
    ],
)
def test_stats_with_a_label_kind_absent_are_nan_without_warnings(
    sums: list[list[float]], expected: list[list[float]]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = _stats_from_sums(np.array(sums, dtype=float), 1)
    assert stats.shape == (2, 3)
    assert stats == pytest.approx(np.array(expected), nan_ok=True)


def test_ci_needs_half_of_the_resamples_finite() -> None:
    assert _ci(np.array([1.0, 2.0, np.nan, np.nan])) == (pytest.approx(1.025), pytest.approx(1.975))
    assert _ci(np.array([1.0, np.nan, np.nan])) is None
    assert _ci(np.array([3.0])) == (3.0, 3.0)
    assert _ci(np.array([np.nan])) is None


def test_selectivity_of_mr_one_and_aar_zero_is_zero() -> None:
    assert harmonic_selectivity(1.0, 0.0) == 0.0


def test_per_sample_counts() -> None:
    items = [j("r1", False, True), j("r1", False, False), j("r1", True, True), j("r2", True, False)]
    assert per_sample_rates(items)[0] == {
        "sample": 0,
        "mr": 0.5,
        "aar": 0.5,
        "misapplied": 1,
        "n_suppress": 2,
        "applied": 1,
        "n_apply": 2,
    }


def test_ci_switch_row_minimum_and_defaults() -> None:
    two_rows = [j("r1", False, True), j("r1", True, True), j("r2", False, False), j("r2", True, False)]
    assert selectivity_scores(two_rows).mr_ci is not None  # two rows are enough
    assert selectivity_scores(two_rows, ci=False).mr_ci is None
    assert selectivity_scores(two_rows[:2]).mr_ci is None  # one row is not
    items = [j(f"r{k}", k % 3 == 0, k % 2 == 0, sample=k % 2) for k in range(40)]
    explicit = selectivity_scores(items, seed=0, n_resamples=2000)
    assert selectivity_scores(items) == explicit
    # without apply labels AAR is undefined and so is the selectivity CI, though MR has one
    no_apply = selectivity_scores([j(f"r{k}", False, k % 2 == 0) for k in range(6)])
    assert no_apply.mr_ci is not None and no_apply.aar_ci is None and no_apply.selectivity_ci is None


def test_selectivity_ci_collapses_for_identical_rows_over_two_samples() -> None:
    items = []
    for k in range(5):
        # sample 0: MR 1/4, AAR 1/2; sample 1: MR 2/4, AAR 2/2
        items += [j(f"r{k}", False, True, 0)] + [j(f"r{k}", False, False, 0)] * 3
        items += [j(f"r{k}", True, True, 0), j(f"r{k}", True, False, 0)]
        items += [j(f"r{k}", False, True, 1)] * 2 + [j(f"r{k}", False, False, 1)] * 2
        items += [j(f"r{k}", True, True, 1)] * 2
    scores = selectivity_scores(items, n_resamples=50)
    keep, aar = 1 - 0.375, 0.75
    assert (scores.mr, scores.aar) == (pytest.approx(0.375), pytest.approx(0.75))
    assert scores.selectivity_ci == (pytest.approx(2 * aar * keep / (aar + keep)),) * 2
    assert scores.mr_ci == (pytest.approx(0.375),) * 2 and scores.aar_ci == (pytest.approx(0.75),) * 2


def test_selectivity_ci_is_none_when_mr_is_undefined() -> None:
    no_suppress = selectivity_scores([j(f"r{k}", True, k % 2 == 0) for k in range(6)])
    assert no_suppress.mr is None and no_suppress.aar_ci is not None
    assert no_suppress.selectivity is None and no_suppress.selectivity_ci is None


def test_summary_sorts_failures_into_generation_judge_and_completeness_errors() -> None:
    from personalign.benchmarks.benchpres.steps import summarize
    from personalign.runs.records import InstanceRecord, TaskResult

    judged_none: dict[str, Any] = {"judgements": []}
    records = [
        InstanceRecord(
            instance_id="a",
            results={
                "preferences": TaskResult(status="error", error="gen failed"),
                "completeness": TaskResult(status="error", error="no response"),
            },
        ),
        InstanceRecord(
            instance_id="b",
            results={
                "preferences": TaskResult(status="error", error="judge bad", scores=judged_none),
                "completeness": TaskResult(status="error", error="rating bad"),
            },
        ),
        InstanceRecord(
            instance_id="c",
            results={
                "preferences": TaskResult(status="ok", scores=judged_none),
                "completeness": TaskResult(status="ok", scores={"rating": 4}),
            },
        ),
    ]
    # a failed generation is counted once, not again as a judge or completeness error
    assert summarize(records)["errors"] == {
        "generation": {"a": "gen failed"},
        "judge": {"b": "judge bad"},
        "completeness": {"b": "rating bad"},
    }

"""A tiny fault campaign (benchmarks/fault_campaign.py's logic): 12 CUPID instances through the real
CLI against a server injecting transport and content faults, one SIGKILL, re-runs until complete.
The final metrics must equal the fault-free run's exactly, with no duplicate ok record, no call paid
twice outside those in flight at the kill, and every retried step keeping its earlier failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fault_campaign import campaign as run_campaign
from tests.support.fault_campaign import check_samples, double_paid, fault_plan, metric_differences


@pytest.mark.slow
def test_no_wrong_number_survives_faults_kills_and_reruns(tmp_path: Path) -> None:
    report = run_campaign(
        "cupid", tmp_path, instances=12, fault_rate=0.2, kills=1, seed=3, timeout=2.0, concurrency=8
    )
    assert sum(report.faults.values()) >= 3, report.faults  # faults were really injected
    assert report.kills == 1
    assert report.status == "complete" and report.errors_left == 0, "\n".join(report.lines())
    assert report.metric_differences == []
    assert report.duplicate_ok == 0
    assert report.double_paid_other == 0, report.double_paid_examples
    assert report.history_lost == 0, report.history_examples
    assert report.passed


def test_the_checks_catch_what_they_guard(tmp_path: Path) -> None:
    """The campaign's checks are not vacuous: a changed metric, an ok line after an ok line, a lost
    error history and a repeat outside any kill are each reported."""
    reference = {"status": "complete", "usage": {"calls": 3}, "inference": {"all": {"f1": 0.5}, "flags": {}}}
    assert metric_differences(reference, {**reference, "usage": {"calls": 9}}) == []
    assert metric_differences(reference, {**reference, "inference": {"all": {"f1": 0.25}, "flags": {}}}) == [
        "inference.all.f1: 0.25 (reference 0.5)"
    ]
    reasked = {**reference, "inference": {"all": {"f1": 0.5}, "flags": {"reask": 2}}}
    assert metric_differences(reference, reasked) == []  # how a reply was obtained is not a metric
    emptied = {**reference, "inference": {"all": {"f1": 0.5}, "flags": {"empty_inference": 1}}}
    assert metric_differences(reference, emptied) == ["inference.flags.empty_inference: unexpected 1"]

    def line(status: str, error: str | None, errors: list[str]) -> str:
        step = {"status": status, "error": error, "errors": errors}
        record = {"instance_id": "a", "steps": {"infer": step}, "results": {"inference": {"status": status}}}
        return json.dumps(record)

    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        "\n".join([line("error", "boom", []), line("ok", None, []), line("ok", None, [])]) + "\n"
    )
    duplicates, retried, lost, _, _ = check_samples(samples)
    assert (duplicates, retried, lost) == (1, 1, 1)
    samples.write_text("\n".join([line("error", "boom", []), line("ok", None, ["boom"])]) + "\n")
    assert check_samples(samples)[:3] == (0, 1, 0)

    ledger = [
        {"hash": "h", "outcome": "ok", "start": 1.0, "end": 1.1},
        {"hash": "h", "outcome": "500", "start": 2.0, "end": 2.1},
        {"hash": "h", "outcome": "ok", "start": 5.0, "end": 5.1},
    ]
    assert double_paid(ledger, ledger[:1], kills=[1.05], grace=0.5)[:2] == (1, 0)
    assert double_paid(ledger, ledger[:1], kills=[3.0], grace=0.5)[:2] == (0, 1)
    assert double_paid(ledger, ledger, kills=[], grace=0.5)[:2] == (0, 0)  # both needed (two samples)
    assert double_paid(ledger[:1], [], kills=[], grace=0.5)[:2] == (0, 0)  # a re-ask: paid once
    assert fault_plan(0.2, 0, 1.0).rates["truncated"] == pytest.approx(0.02)

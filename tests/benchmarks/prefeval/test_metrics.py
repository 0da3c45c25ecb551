"""PrefEval metrics against hand-computed values (the official combination of the four checks)."""

from __future__ import annotations

import itertools

import pytest

from personalign.benchmarks.prefeval.metrics import Scored, accuracy, breakdown, combine


def test_combination_matches_the_official_rules_on_every_case() -> None:
    for ack, hall, viol, helpful in itertools.product([False, True], repeat=4):
        o = combine(ack, hall, viol, helpful)
        assert o.hallucinated == (ack and hall)  # only counts when a preference was acknowledged
        assert o.inconsistent == (ack and not hall and viol and helpful)
        assert o.hallucinated_violation == (ack and hall and viol and helpful)
        assert o.unaware_violation == (not ack and viol and helpful)
        # the official "none of the four error types" is: helpful and not violating
        assert o.followed == (helpful and not viol)


def test_specific_cases() -> None:
    assert combine(True, None, False, True).followed is True
    refused = combine(False, None, False, False)
    assert refused.followed is False and refused.unhelpful is True and refused.unaware_violation is False
    unaware = combine(False, True, True, True)
    assert unaware.unaware_violation is True and unaware.hallucinated is False and not unaware.followed


def test_accuracy_breakdowns_and_error_rates() -> None:
    def s(topic: str, form: str, turns: int, ok: bool, unhelpful: bool = False) -> Scored:
        errors = {
            "unhelpful": unhelpful,
            "inconsistent": False,
            "hallucinated_violation": False,
            "unaware_violation": not ok and not unhelpful,
        }
        return Scored(topic, form, turns, ok, errors)

    scored = [
        s("a", "explicit", 0, True),
        s("a", "explicit", 10, False),
        s("b", "choice", 0, True),
        s("b", "choice", 10, False, unhelpful=True),
        s("b", "persona", 2, True),
    ]
    overall = accuracy(scored)
    assert overall["accuracy"] == pytest.approx(3 / 5) and overall["n"] == 5
    lo, hi = overall["ci"]
    assert 0.0 <= lo <= 0.6 <= hi <= 1.0
    assert overall["error_rates"] == {
        "unhelpful": pytest.approx(0.2),
        "inconsistent": 0.0,
        "hallucinated_violation": 0.0,
        "unaware_violation": pytest.approx(0.2),
    }
    turns = breakdown(scored, lambda x: x.turns)
    assert list(turns) == ["0", "2", "10"]  # numeric order
    assert turns["0"]["accuracy"] == 1.0 and turns["10"]["accuracy"] == 0.0 and turns["2"]["n"] == 1
    assert turns["2"]["ci"] is None  # one instance: no interval
    forms = breakdown(scored, lambda x: x.form)
    assert forms["explicit"]["accuracy"] == 0.5 and forms["persona"]["accuracy"] == 1.0
    assert accuracy([]) == {"accuracy": None, "ci": None, "n": 0}

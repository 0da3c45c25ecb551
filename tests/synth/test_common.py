"""The helpers every synthesis pipeline shares (personalign.synth.common)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from personalign.benchmarks.benchpres.synth import BenchpresSynthConfig
from personalign.benchmarks.cupid.synth import CupidSynthConfig
from personalign.benchmarks.hicupid.synth import HicupidSynthConfig
from personalign.errors import ConfigError, ParseError
from personalign.synth.common import (
    UnitState,
    fixed_list_schema,
    object_schema,
    parse_fixed_list,
    split_failed,
    text_output,
)


class Pair(BaseModel):
    a: str


class Pairs(BaseModel):
    pairs: list[Pair]


def test_fixed_list_schema_requires_exactly_n_items() -> None:
    schema = fixed_list_schema("pairs", object_schema({"a": {"type": "string"}}), 3)
    assert schema["required"] == ["pairs"]
    array = schema["properties"]["pairs"]
    assert (array["minItems"], array["maxItems"]) == (3, 3)
    assert array["items"]["required"] == ["a"]


def test_parse_fixed_list_counts_checks_and_returns_plain_values() -> None:
    parse = parse_fixed_list(Pairs, "pairs", 2, "pairs", noun="pairs")
    assert parse('{"pairs": [{"a": "x"}, {"a": "y"}]}') == [{"a": "x"}, {"a": "y"}]
    with pytest.raises(ParseError, match="pairs: 1 pairs, expected 2"):
        parse('{"pairs": [{"a": "x"}]}')

    def no_repeats(items: list[Pair]) -> None:
        if len({i.a for i in items}) != len(items):
            raise ParseError("pairs: repeated")

    strict = parse_fixed_list(Pairs, "pairs", 2, "pairs", check=no_repeats)
    with pytest.raises(ParseError, match="repeated"):
        strict('{"pairs": [{"a": "x"}, {"a": "x"}]}')


def test_text_output_folds_space_and_bounds_lengths() -> None:
    model = text_output("Out", {"name": 8}, age=(int, ...))
    assert model.model_validate({"name": " a   b ", "age": 3}).model_dump() == {"age": 3, "name": "a b"}
    with pytest.raises(ValidationError):
        model.model_validate({"name": "much too long", "age": 3})
    with pytest.raises(ValidationError):
        model.model_validate({"name": "", "age": 3})


def test_split_failed_keeps_unit_order_and_records_failures() -> None:
    states = [
        UnitState(unit_id="a", status="ok"),
        UnitState(unit_id="b", status="error", failed_stage="persona", error="bad JSON"),
        UnitState(unit_id="c", status="ok"),
    ]
    finished, failed, report = split_failed(states)
    assert [s.unit_id for s in finished] == ["a", "c"]
    assert failed == [{"id": "b", "stage": "persona", "error": "bad JSON"}]
    assert list(report) == ["a", "b", "c"] and report["b"]["status"] == "failed"


@pytest.mark.parametrize(
    ("config", "unit_count", "models"),
    [
        (
            CupidSynthConfig(generator="scripted/g", user_simulator="scripted/u", assistant="scripted/a",
                             decomposer="scripted/g"),
            "n_personas",
            {"generator", "user_simulator", "assistant", "decomposer"},
        ),
        (HicupidSynthConfig(generator="scripted/g"), "n_users", None),
        (BenchpresSynthConfig(generator="scripted/g"), "n_profiles", None),
    ],
)  # fmt: skip
def test_shared_settings_identity_drops_unit_count_and_permission(
    config: object, unit_count: str, models: object
) -> None:
    identity = config.identity()  # type: ignore[attr-defined]
    assert {"seed", "seeds_file", "length_scale", "reasks", "prompts"} <= set(identity)
    assert "allow_seed_reuse" not in identity
    assert unit_count not in identity  # the pool may grow between runs into one directory
    if models is not None:  # CUPID nests its role labels, the others keep them in place
        assert set(identity["models"]) == models and "generator" not in identity
    else:
        assert identity["generator"] == "scripted/g"


def test_shared_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="length_scale"):
        HicupidSynthConfig(generator="scripted/g", length_scale=0)
    with pytest.raises(ConfigError, match="reasks"):
        BenchpresSynthConfig(generator="scripted/g", reasks=-1)

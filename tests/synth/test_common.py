"""The helpers every synthesis pipeline shares (personalign.synth.common)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from personalign.benchmarks.benchpres.synth import BenchpresSynthConfig
from personalign.benchmarks.cupid.synth import CupidSynthConfig
from personalign.benchmarks.hicupid.synth import HicupidSynthConfig
from personalign.errors import ConfigError, DataError, ParseError
from personalign.synth.common import (
    UnitState,
    fixed_list_schema,
    load_seeds,
    object_schema,
    parse_fixed_list,
    split_failed,
    text_output,
    text_schema,
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


# --- PersonaHub seeds ------------------------------------------------------------------------------

STAND_IN = [  # our own sentences, in PersonaHub's "instruction" layout
    {"input persona": "A retired pilot who restores small aircraft on weekends.", "synthesized text": "x"},
    {"input persona": "Someone who collects stamps.", "synthesized text": "x"},  # no occupation: left out
    {"input persona": "A  school teacher who runs the chess club.", "synthesized text": "x"},
    {"input persona": "A school teacher who runs the chess club.", "synthesized text": "x"},  # repeated
    {"input persona": "A data scientist and former nurse studying hospital queues.", "synthesized text": "x"},
]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_local_personahub_file_gives_seeds_with_matched_occupations(tmp_path: Path) -> None:
    seeds = load_seeds(str(_write_jsonl(tmp_path / "ph.jsonl", STAND_IN)))
    assert [(s.occupation, s.description) for s in seeds] == [
        ("pilot", "A retired pilot who restores small aircraft on weekends."),
        ("teacher", "A school teacher who runs the chess club."),
        ("data_scientist", "A data scientist and former nurse studying hospital queues."),  # the first named
    ]


def test_a_personahub_file_with_an_empty_persona_names_file_row_and_field(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "ph.jsonl", [STAND_IN[0], {"input persona": " "}])
    with pytest.raises(DataError, match=r"ph.jsonl.*row 1.*input persona"):
        load_seeds(str(path))


def test_personahub_from_the_hub_and_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    asked: list[tuple[Any, ...]] = []

    def online(repo: str, subset: str, split: str) -> dict[str, list[str]]:
        asked.append((repo, subset, split))
        return {"input persona": [r["input persona"] for r in STAND_IN]}

    monkeypatch.setattr(datasets, "load_dataset", online)
    assert [s.occupation for s in load_seeds("personahub")] == ["pilot", "teacher", "data_scientist"]
    assert asked == [("proj-persona/PersonaHub", "instruction", "train")]
    load_seeds("personahub:persona")
    assert asked[-1][1] == "persona"

    def offline(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(
        ConfigError, match=r"cannot load proj-persona/PersonaHub.*--seeds FILE.*bundled seeds"
    ):
        load_seeds("personahub")
    assert len(load_seeds(None)) == 40  # the bundled seeds stay the default


def test_synth_cupid_runs_on_personahub_seeds(tmp_path: Path) -> None:
    from personalign.benchmarks.cupid.synth import persona_templates

    seeds = load_seeds(str(_write_jsonl(tmp_path / "ph.jsonl", STAND_IN)))
    templates = persona_templates(seeds, 3, 0)
    assert sorted(t["occupation"] for t in templates) == ["data_scientist", "pilot", "teacher"]


def test_short_length_bounds_stay_without_a_scale() -> None:
    from personalign.benchmarks.cupid.synth import factors_schema
    from personalign.synth.common import SHORT_BOUND, scale_lengths

    schema = {"type": "object", "properties": {"name": text_schema(60), "story": text_schema(400)}}
    kept = scale_lengths(schema, None)["properties"]
    # a name stays bounded (cheap for a grammar); a long text loses its bound
    assert kept["name"]["maxLength"] == 60 and "maxLength" not in kept["story"]
    assert scale_lengths(schema, 2.0)["properties"]["story"]["maxLength"] == 800
    # the CUPID factor name keeps its bound, so a small model cannot write a paragraph there
    factor = scale_lengths(factors_schema(1), None)["properties"]["factors"]["items"]["properties"]["factor"]
    assert factor["maxLength"] <= SHORT_BOUND

"""HiCUPID-style synthesis with scripted models: metadata, dialogues, QA rows, checks, resume."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.synth import (
    DIMENSIONS,
    RELATIONS,
    HicupidDialogueRow,
    HicupidQARow,
    HicupidSynthConfig,
    synthesize_hicupid,
    user_plans,
)
from personalign.errors import ConfigError
from personalign.llm import CallCache, GenerateConfig, ModelFactory, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.types import Message

SPEC = "scripted/hicupid"


def factory_for(backend: ScriptedBackend, cache: Path | None = None) -> ModelFactory:
    backends: dict[str, Backend] = {str(parse_model_spec(SPEC)): backend}
    return ModelFactory(cache=CallCache(cache) if cache else None, backends=backends)


def config(**overrides: Any) -> HicupidSynthConfig:
    return HicupidSynthConfig(**{"generator": SPEC, "n_users": 2, **overrides})


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_plans_cover_every_dimension_once_and_balance_relations() -> None:
    plans = user_plans(config(n_users=4))
    for plan in plans:
        assert [p["category"] for p in plan["personas"]] == list(DIMENSIONS)
        assert all(p["sentiment"] == RELATIONS[p["relation"]] for p in plan["personas"])
        assert len(set(plan["times"])) == 10 and plan["times"] == sorted(plan["times"])
        assert len(plan["multi"]) == 5
    relations = Counter(p["relation"] for plan in plans for p in plan["personas"])
    assert max(relations.values()) - min(relations.values()) <= 1
    assert user_plans(config(n_users=2)) == plans[:2]
    few = user_plans(config(n_users=3, n_personas=5, n_multi=2))
    assert Counter(p["category"] for plan in few for p in plan["personas"]).most_common(1)[0][1] == 1


def test_the_paper_sizes_produce_40_dialogues_and_40_questions_per_user(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = synthesize_hicupid(config(), out, factory_for(ScriptedBackend()))
    assert result.summary["passed_validation"] == 2
    dialogue_rows, qa_rows = rows(out / "dialogue.jsonl"), rows(out / "qa.jsonl")
    # Two users: user 1 is unseen (Test Set 2); every 5th question of user 0 is Test Set 1.
    assert {(r["user_id"], r.pop("split")) for r in dialogue_rows} == {(0, "train"), (1, "test")}
    assert Counter((r["user_id"], r.pop("split")) for r in qa_rows) == {
        (0, "train"): 32,
        (0, "test_1"): 8,
        (1, "test_2"): 40,
    }
    dialogues = [HicupidDialogueRow.model_validate(r) for r in dialogue_rows]
    qa = [HicupidQARow.model_validate(r) for r in qa_rows]
    loaded = load_hicupid(out)  # the benchmark's loader accepts what synthesis writes
    assert len(loaded.qa) == 80 and {q.split for q in loaded.qa} == {"train", "test_1", "test_2"}
    for user in (0, 1):
        mine = [d for d in dialogues if d.user_id == user]
        ids = sorted({d.dialogue_id for d in mine})
        assert ids == list(range(40 * user, 40 * user + 40))  # dialogue_id = 40 * user_id + k
        per = Counter(d.dialogue_id for d in mine)
        kinds = {d.dialogue_id: d.type for d in mine}
        assert Counter(kinds.values()) == {"persona": 25, "profile": 5, "schedule": 10}
        assert {per[i] for i in ids if kinds[i] == "persona"} == {10}
        assert {per[i] for i in ids if kinds[i] != "persona"} == {1}
        questions = [q for q in qa if q.user_id == user]
        assert Counter(q.type for q in questions) == {"persona": 25, "profile": 5, "schedule": 10}
        assert len({q.question_id for q in questions}) == 40
        for q in questions:
            if q.type == "profile":  # the loader reads [:5] as profile dialogues, [5:] as persona
                assert [kinds[d] for d in q.dialogue_id] == ["profile"] * 5 + ["persona"]
                assert q.metadata.profile is not None and q.metadata.persona is not None
            else:
                assert [kinds[d] for d in q.dialogue_id] == [q.type]
            if q.type == "schedule":
                assert q.metadata.schedule is not None and q.metadata.persona is None
            assert q.personalized_answer != q.general_answer
    users = rows(out / "users.jsonl")
    assert set(users[0]["profile"]) == {"age", "gender", "personality", "occupation", "income_range"}


def test_a_question_that_names_its_persona_is_rejected_and_failures_resume(tmp_path: Path) -> None:
    calls = {"n": 0}

    def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
        calls["n"] += 1
        user = next(m.content for m in messages if m.role == "user")
        if config.schema_name == "synth_hicupid_qa" and "(topic: " in user:
            entity = user.split("The user ", 1)[1].split(" (topic")[0]
            return json.dumps(
                {
                    "question": f"Any tips about {entity}?",
                    "personalized_answer": "a b c d e",
                    "general_answer": "f g h i j",
                }
            )
        return default_responder(messages, config)

    out = tmp_path / "out"
    small = config(n_users=1, n_personas=3, n_schedules=2, n_multi=1, persona_rounds=2)
    result = synthesize_hicupid(small, out, factory_for(ScriptedBackend(responder)))
    assert result.summary["passed_validation"] == 0
    assert "names the persona entity" in result.summary["rejected"][0]["problems"][0]
    assert rows(out / "qa.jsonl") == []

    backend = ScriptedBackend(
        lambda m, c: "{}" if c.schema_name == "synth_hicupid_qa" else default_responder(m, c)
    )
    out2 = tmp_path / "out2"
    failed = synthesize_hicupid(small, out2, factory_for(backend, tmp_path / "c.sqlite"))
    assert failed.summary["failed"][0]["stage"].startswith("qa/")
    fixed = ScriptedBackend()
    # a new cache: the old one would replay the unparseable answers (they are cached, as in the core)
    again = synthesize_hicupid(small, out2, factory_for(fixed))
    assert again.summary["passed_validation"] == 1
    assert fixed.calls == 3 + 1 + 2  # only the QA stages were generated again


def test_sizes_are_checked() -> None:
    with pytest.raises(ConfigError, match="n_personas"):
        config(n_personas=26)
    with pytest.raises(ConfigError, match="n_multi"):
        config(n_personas=2, n_multi=3)

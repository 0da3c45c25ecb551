"""CUPID synthesis with scripted models: every stage's structure, validation, failures and resume."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.benchmarks.cupid.synth import (
    CupidSynthConfig,
    parse_changed,
    parse_factors,
    persona_templates,
    plan_sessions,
    synthesize_cupid,
)
from personalign.benchmarks.cupid.synth_checks import lexical_leak
from personalign.errors import ConfigError, DataError, ParseError
from personalign.llm import CallCache, GenerateConfig, ModelFactory, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.synth.common import UnitState, load_seeds
from personalign.synth.taxonomy import CAREER_LEVELS, DECISION_STYLES, SCHWARTZ_VALUES
from personalign.types import Message
from tests.support.synth_responders import leaky_request

SPEC = "scripted/synth"


def config(**overrides: Any) -> CupidSynthConfig:
    base: dict[str, Any] = dict(
        generator=SPEC, user_simulator=SPEC, assistant=SPEC, decomposer=SPEC, leak_judge=SPEC, n_personas=2
    )
    return CupidSynthConfig(**{**base, **overrides})


class Recorder(ScriptedBackend):
    """A scripted backend that remembers every prompt it was asked."""

    def __init__(self, responder: Any = None) -> None:
        super().__init__(responder)
        self.prompts: list[str] = []

    async def generate(self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float) -> Any:
        self.prompts.append(json.dumps([[m.role, m.content] for m in messages]) + config.model_dump_json())
        return await super().generate(messages, config, timeout=timeout)


def factory_for(backend: ScriptedBackend, cache: Path | None = None) -> ModelFactory:
    backends: dict[str, Backend] = {str(parse_model_spec(SPEC)): backend}
    return ModelFactory(cache=CallCache(cache) if cache else None, backends=backends)


def states(out: Path) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((out / "state").glob("*.json"))}


# --- pure parts -----------------------------------------------------------------------------


def test_persona_templates_balance_every_attribute_and_share_their_prefix() -> None:
    seeds = load_seeds(None)
    templates = persona_templates(seeds, 12, seed=3)
    assert Counter(t["career_level"] for t in templates) == {level: 4 for level in CAREER_LEVELS}
    assert Counter(t["decision_making_styles"] for t in templates) == {s: 3 for s in DECISION_STYLES}
    values = Counter(v for t in templates for v in t["personal_values"])
    assert set(values) == set(SCHWARTZ_VALUES) and max(values.values()) - min(values.values()) <= 1
    for t in templates:
        assert len(set(t["personal_values"])) == 2
        traits = [trait.rsplit(" (", 1)[0] for trait in t["personality_traits"]]
        assert len(set(traits)) == 2
    assert len({t["occupation"] for t in templates}) == 12  # distinct while the pool allows
    assert persona_templates(seeds, 5, seed=3) == templates[:5]
    assert persona_templates(seeds, 5, seed=4) != templates[:5]


def test_bad_seed_file_names_file_row_and_field(tmp_path: Path) -> None:
    path = tmp_path / "seeds.jsonl"
    path.write_text('{"occupation": "nurse", "description": "A nurse."}\n{"occupation": "chef"}\n')
    with pytest.raises(DataError) as err:
        load_seeds(str(path))
    assert str(path) in str(err.value) and "row 1" in str(err.value) and "description" in str(err.value)


@pytest.mark.parametrize("n_sessions", [9, 13, 16])
def test_session_plan_has_the_paper_positions(n_sessions: int) -> None:
    others = ["o1", "o2", "o3", "o4", "o5", "o6"]
    for seed in range(50):
        plan = plan_sessions(n_sessions, "A", "B", others, random.Random(seed))
        roles = [r for r, _ in plan]
        assert len(plan) == n_sessions
        assert roles[-1] == "A_changed"
        a = [i for i, r in enumerate(roles) if r == "A"]
        changed = [i for i, r in enumerate(roles[:-1]) if r == "A_changed"]
        assert len(a) == 2 and len(changed) == 2 and max(a) < min(changed)
        assert max(changed) < n_sessions - 2  # the four earlier positions come from range(n-2)
        assert roles.count("B") == 2
        assert all(f == "A" for r, f in plan if r.startswith("A"))
        assert all(f == "B" for r, f in plan if r == "B")
        other_factors = [f for r, f in plan if r == "other"]
        assert len(other_factors) == n_sessions - 7
        assert set(other_factors) <= set(others)
        # cycled evenly through the other factors
        counts = Counter(other_factors)
        assert max(counts.values()) - min(counts.values()) <= 1


def _factor(name: str, preference: str) -> dict[str, Any]:
    return {
        "background": "b",
        "factor": name,
        "task_types": ["Planning"],
        "preference_type": "Tone",
        "preference": preference,
    }


def test_factor_parser_builds_exactly_one_mutual_pair_and_renames_repeats() -> None:
    output = {
        "factors": [
            {**_factor("Board", "Use formal language always."), "factor_type": "Person/Group"},
            {**_factor("Board", "Use numbered steps in all replies."), "factor_type": "Event/Time"},
        ],
        "contrastive_pair": {
            "factor_type": "Location/Place",
            "first": _factor("Office", "Keep every answer long and detailed."),
            "second": _factor("Board", "Keep every answer short and casual."),
        },
    }
    rows = parse_factors(2)(json.dumps(output))
    assert [r["factor"] for r in rows] == ["Board", "Board (2)", "Office", "Board (3)"]
    paired = [r for r in rows if r["related_factor"]]
    assert len(paired) == 2
    assert (
        paired[0]["related_factor"] == paired[1]["factor"]
        and paired[1]["related_factor"] == paired[0]["factor"]
    )
    assert {r["factor_type"] for r in paired} == {"Location/Place"}
    assert rows[1]["renamed_from"] == "Board"
    with pytest.raises(ParseError, match="expected 3"):
        parse_factors(3)(json.dumps(output))
    bad = {**output, "contrastive_pair": {**output["contrastive_pair"], "factor_type": "Spaceship"}}
    with pytest.raises(ParseError, match="factor_type"):
        parse_factors(2)(json.dumps(bad))


def test_a_preference_must_be_a_sentence_where_it_is_written() -> None:
    """SmolLM2's degenerate preferences are refused by the stage that writes them (re-sampling keeps
    finished stages, so a later stage could never repair them)."""
    ok = {"factor_type": "Person/Group", **_factor("Board", "Use formal language always.")}
    pair = {
        "factor_type": "Location/Place",
        "first": _factor("Office", "Keep every answer long and detailed."),
        "second": _factor("Home", "Keep every answer short and casual."),
    }
    for preference in ("Businesses, Businesses", "Fantasy_101_123_456_789", "Practicality,"):
        bad = {"factors": [{**ok, "preference": preference}], "contrastive_pair": pair}
        with pytest.raises(ParseError, match=r"factors\.0\.preference: .*sentence"):
            parse_factors(1)(json.dumps(bad))
    assert len(parse_factors(1)(json.dumps({"factors": [ok], "contrastive_pair": pair}))) == 3
    changed = {"preference_type": "Tone", "preference": "Businesses", "conflict": "Businesses"}
    with pytest.raises(ParseError, match="sentence"):
        parse_changed("Use formal language always.", conflict=True)(json.dumps(changed))


def test_the_preference_schema_asks_for_the_sentence_the_parser_checks() -> None:
    """A grammar-constrained model is held to words: the schema's pattern refuses what the parser
    refuses, and bounds the length the parser allows (the pattern replaces llama.cpp's length bounds)."""
    import re

    from personalign.benchmarks.cupid.synth import CHANGED_SCHEMA, PREFERENCE_TEXT, a_sentence, factors_schema

    pattern = re.compile(PREFERENCE_TEXT["pattern"])
    good = ["Use formal language always.", "Anything for the Board must be long, detailed and formal."]
    for text in good:
        assert pattern.match(text) and a_sentence(text)
    # SmolLM2 wrote "Practicality (1) (2)" when a word could start with a digit or a parenthesis
    for text in (
        "Practicality,",
        "Businesses, Businesses",
        "Fantasy_101_123_456_789",
        "Practicality (1) (2)",
    ):
        assert not pattern.match(text)
        with pytest.raises(ValueError):
            a_sentence(text)
    assert not pattern.match(" ".join(["word"] * 24))  # at most 23 words
    longest = " ".join(["w" * 14 + ","] * 23) + "."
    assert pattern.match(longest) and len(longest) <= 400
    body = factors_schema(1)["properties"]["contrastive_pair"]["properties"]["first"]
    assert body["properties"]["preference"] == PREFERENCE_TEXT == CHANGED_SCHEMA["properties"]["preference"]


def test_lexical_leak_measures_preference_words_in_the_request() -> None:
    preference = "Reports for the board must use formal language and numbered sections."
    assert lexical_leak("Please draft the board report.", preference) < 0.5
    assert lexical_leak("Draft board reports in formal language with numbered sections.", preference) >= 0.8


def test_config_rejects_sizes_that_cannot_hold_the_structure() -> None:
    with pytest.raises(ConfigError, match="n_sessions"):
        config(n_sessions=8)
    with pytest.raises(ConfigError, match="n_factors"):
        config(n_factors=2)


# --- the whole pipeline ---------------------------------------------------------------------


def test_pipeline_writes_three_instance_types_with_the_right_sessions(tmp_path: Path) -> None:
    out = tmp_path / "out"
    backend = Recorder()
    result = synthesize_cupid(config(n_personas=2), out, factory_for(backend, tmp_path / "c.sqlite"))
    summary = result.summary
    assert summary["status"] == "complete" and summary["passed_validation"] == 2
    assert summary["instances_by_type"] == {"consistent": 2, "contrastive": 2, "changing": 2}

    dataset = load_cupid(out / "cupid.jsonl")  # the benchmark's own loader accepts the output
    assert len(dataset.instances) == 6
    for pid, state in states(out).items():
        stages = state["stages"]
        sessions = [stages[f"session/{i}"] for i in range(13)]
        info = stages["changed"]
        a, b = info["current_factor"], info["contrastive_factor"]
        original = next(s["preference"] for s in sessions if s["plan"] == "A")
        assert [s["plan"] for s in sessions].count("A_changed") == 3
        assert info["changed_preference"] != original
        assert sum(1 for f in stages["factors"] if f["related_factor"]) == 2
        # every session except the last is a simulated dialogue ending on the user's feedback
        for i in range(12):
            chat = stages[f"dialogue/{i}"]["chat"]
            assert len(chat) >= 3 and len(chat) % 2 == 1
            assert [m["role"] for m in chat[:2]] == ["user", "assistant"]
        assert len(stages["dialogue/12"]["chat"]) == 1
        by_type = {i.instance_type: i for i in dataset.instances if i.persona_id.replace("+", "_") == pid}
        assert set(by_type) == {"consistent", "contrastive", "changing"}
        requests = {i.current_request for i in by_type.values()}
        assert requests == {stages["dialogue/12"]["chat"][0]["content"]}
        for itype, instance in by_type.items():
            prior = instance.prior_interactions
            assert len(prior) == 8
            factors = [s.context_factor for s in prior]
            prefs = [s.contextual_preference for s in prior]
            assert factors.count(a) == (4 if itype == "changing" else 2)
            assert factors.count(b) == (2 if itype == "contrastive" else 0)
            assert prefs.count(info["changed_preference"]) == (2 if itype == "changing" else 0)
            assert instance.current_context_factor == a
            gold = info["changed_preference"] if itype == "changing" else original
            assert instance.current_contextual_preference == gold
            # sessions stay in chronological order
            plan_order = [s["context_factor"] for s in sessions[:-1]]
            positions = []
            for s in prior:
                k = next(
                    k
                    for k, x in enumerate(sessions[:-1])
                    if x["context_factor"] == s.context_factor
                    and x["preference"] == s.contextual_preference
                    and stages[f"dialogue/{k}"]["chat"][0]["content"] == s.dialogue[0].content
                )
                positions.append(k)
            assert positions == sorted(positions) and len(plan_order) == 12
        # consistent and contrastive drop the same two "other" sessions
        drop = {
            t: {
                s.dialogue[0].content for s in by_type[t].prior_interactions if s.context_factor not in (a, b)
            }
            for t in ("contrastive", "changing", "consistent")
        }
        assert drop["contrastive"] == drop["changing"]
        assert len(drop["consistent"]) == 6 and len(drop["contrastive"]) == 4

    raw = json.loads((out / "raw" / "personas.json").read_text())
    assert {k for k in raw[0]} >= {"id", "seed", "career_level", "personality_traits", "personal_values"}
    data = json.loads(next((out / "raw" / "data").glob("*.json")).read_text())
    assert set(data) >= {"context_factors", "sessions", "interactions"}
    assert all(s["checklist"] for s in data["sessions"])

    # the generated data runs through the CUPID benchmark
    cupid = CupidConfig(subject=SPEC, decomposer=SPEC, matcher=SPEC, judge=SPEC)
    run = run_cupid(
        cupid,
        RunSettings(run_dir=tmp_path / "run", limit=1, progress=False, cache_path=tmp_path / "c2.sqlite"),
        data=out / "cupid.jsonl",
    )
    assert run.summary["inference"]["n_scored"] == 1


def test_resume_after_interruption_repeats_no_call(tmp_path: Path) -> None:
    class Interrupt(Exception):
        pass

    # Reference: an uninterrupted run, without any call cache.
    reference = Recorder()
    synthesize_cupid(config(n_personas=4), tmp_path / "ref", factory_for(reference), concurrency=1)

    first = Recorder()
    done: list[str] = []

    def stop_after_two(state: UnitState) -> None:
        done.append(state.unit_id)
        if len(done) == 2:
            raise Interrupt

    out = tmp_path / "out"
    cache = tmp_path / "c.sqlite"  # answers a call that was in flight when the run stopped
    with pytest.raises(Interrupt):
        synthesize_cupid(
            config(n_personas=4), out, factory_for(first, cache), concurrency=1, on_done=stop_after_two
        )
    finished = [s for s in states(out).values() if s["status"] == "ok"]
    # The persona in progress when the interrupt came may be partial or (Python < 3.12's
    # wait_for can swallow a cancellation) finished; the fourth never started.
    assert 2 <= len(finished) <= 3 and len(states(out)) <= 3
    second = Recorder()
    factory = factory_for(second, cache)
    result = synthesize_cupid(config(n_personas=4), out, factory, concurrency=1)
    assert result.summary["passed_validation"] == 4
    assert not set(first.prompts) & set(second.prompts)  # nothing asked twice
    assert len(first.prompts) + len(second.prompts) == len(reference.prompts)
    # Finished personas and stages come from their state files, not from the cache: at most
    # the one stage cut short by the interruption is answered from the cache.
    assert factory.tracker.cache_hits <= 2
    assert (out / "cupid.jsonl").read_text() == (tmp_path / "ref" / "cupid.jsonl").read_text()

    # A finished synthesis re-run makes no call at all.
    third = Recorder()
    synthesize_cupid(config(n_personas=4), out, factory_for(third), concurrency=1)
    assert third.prompts == []
    # Growing the pool keeps the first personas and only generates the new ones.
    fourth = Recorder()
    grown = synthesize_cupid(config(n_personas=5), out, factory_for(fourth), concurrency=1)
    assert grown.summary["instances_written"] == 15
    assert 0 < len(fourth.prompts) < len(reference.prompts) / 2


def test_a_failing_stage_is_recorded_and_the_rest_of_the_pool_still_finishes(tmp_path: Path) -> None:
    broken = {"on": True}

    def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
        user = next(m.content for m in messages if m.role == "user")
        if (
            broken["on"]
            and config.schema_name == "synth_session"
            and "Episode 4 of" in user
            and "works as a farmer" in user
        ):
            return "not json at all"
        return default_responder(messages, config)

    out = tmp_path / "out"
    result = synthesize_cupid(config(n_personas=2), out, factory_for(Recorder(responder)))
    summary = result.summary
    assert summary["status"] == "complete_with_errors"
    assert [f["stage"] for f in summary["failed"]] == ["session/3"]
    assert "unparseable output" in summary["failed"][0]["error"]
    assert summary["instances_written"] == 3  # the other persona's three instances
    failed_state = next(s for s in states(out).values() if s["status"] == "error")
    assert "session/2" in failed_state["stages"] and "session/3" not in failed_state["stages"]
    assert failed_state["steps"]["session/3"]["status"] == "error"
    assert len(failed_state["steps"]["session/3"]["raw"]) == 2  # the re-ask was tried and recorded

    # Fixed model, same directory: only the failed persona's remaining stages are generated.
    broken["on"] = False
    again = Recorder(responder)
    result = synthesize_cupid(config(n_personas=2), out, factory_for(again, tmp_path / "c.sqlite"))
    assert result.summary["status"] == "complete" and result.summary["instances_written"] == 6
    assert not any('"synth_persona"' in p or "synth_factors" in p for p in again.prompts)


def test_a_leaking_request_rejects_the_persona(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = synthesize_cupid(config(n_personas=1), out, factory_for(Recorder(leaky_request)))
    assert result.summary["passed_validation"] == 0 and result.summary["instances_written"] == 0
    problems = result.summary["rejected"][0]["problems"]
    assert any(p.startswith("leak (lexical)") for p in problems)
    assert any(p.startswith("leak (judge)") for p in problems)
    assert (out / "cupid.jsonl").read_text() == ""
    rejected = json.loads((out / "rejected.jsonl").read_text().splitlines()[0])
    assert len(rejected["instances"]) == 3
    report = json.loads((out / "validation.json").read_text())
    assert next(iter(report.values()))["status"] == "rejected"


def test_an_unparseable_leak_verdict_is_never_read_as_no_leak(tmp_path: Path) -> None:
    def no_verdict(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "synth_leak_check":
            return "maybe?"
        return default_responder(messages, config)

    result = synthesize_cupid(config(n_personas=1), tmp_path / "out", factory_for(Recorder(no_verdict)))
    problems = result.summary["rejected"][0]["problems"]
    assert problems and all(p.startswith("leak (judge): no verdict") for p in problems)


def test_another_configuration_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    synthesize_cupid(config(n_personas=1), out, factory_for(Recorder()))
    with pytest.raises(ConfigError, match="another configuration"):
        synthesize_cupid(config(n_personas=1, max_turns=3), out, factory_for(Recorder()))


def test_a_copied_contrastive_preference_is_regenerated_on_its_own(tmp_path: Path) -> None:
    def copier(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = default_responder(messages, config)
        if config.schema_name == "synth_factors":
            data = json.loads(text)
            pair = data["contrastive_pair"]
            pair["second"]["preference"] = pair["first"]["preference"]
            return json.dumps(data)
        return text

    backend = Recorder(copier)
    result = synthesize_cupid(config(n_personas=1), tmp_path / "out", factory_for(backend))
    assert result.summary["passed_validation"] == 1
    state = next(iter(states(tmp_path / "out").values()))
    assert state["steps"]["factors/contrast"]["status"] == "ok"
    first, second = state["stages"]["factors"][-2:]
    assert first["preference"] != second["preference"] and second["regenerated"] == "preference"


def test_resampling_a_failed_persona_asks_anew_instead_of_replaying_the_cache(tmp_path: Path) -> None:
    # Like llama.cpp, this model honours the seed: the same seed gives the same (bad) reply.
    def first_sample_fails(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "synth_changed_preference" and config.seed == 0:
            return "not json"
        return default_responder(messages, config)

    out, cache = tmp_path / "out", tmp_path / "c.sqlite"
    first = synthesize_cupid(config(n_personas=1), out, factory_for(Recorder(first_sample_fails), cache))
    assert first.summary["failed"][0]["stage"] == "changed"
    # Same cache, no re-sampling: the rejected answer was evicted, so the same prompt is asked
    # again (never replayed from the cache); this model answers it badly again.
    replay = Recorder(first_sample_fails)
    again = synthesize_cupid(config(n_personas=1), out, factory_for(replay, cache))
    assert again.summary["failed"] and replay.prompts
    assert all("synth_changed_preference" in p for p in replay.prompts)
    resampled = Recorder(first_sample_fails)
    fixed = synthesize_cupid(config(n_personas=1), out, factory_for(resampled, cache), resample_failed=True)
    assert fixed.summary["passed_validation"] == 1
    state = next(iter(states(out).values()))
    assert state["attempt"] == 1
    # persona and factors were reused from the state file; only later stages were asked
    assert not any("synth_persona" in p or "synth_factors" in p for p in resampled.prompts)
    assert all('"sample_index":1' in p for p in resampled.prompts)
    assert not any('"seed":0,' in p for p in resampled.prompts)  # a new sample, not the same reply


def test_usage_is_summed_over_every_invocation_and_a_resume_never_zeroes_it(tmp_path: Path) -> None:
    class Interrupt(Exception):
        pass

    def stop(state: UnitState) -> None:
        raise Interrupt

    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        synthesize_cupid(config(n_personas=2), out, factory_for(Recorder()), concurrency=1, on_done=stop)
    first = json.loads((out / "usage_log.json").read_text())
    assert [e["status"] for e in first] == ["interrupted"] and first[0]["usage"]["calls"] > 0
    second = synthesize_cupid(config(n_personas=2), out, factory_for(Recorder()), concurrency=1)
    usage = second.summary["usage"]
    calls_2 = usage["this_invocation"]["calls"]
    assert usage["invocations"] == 2 and usage["calls"] == first[0]["usage"]["calls"] + calls_2 > calls_2
    # a finished synthesis re-run makes no call, and the totals stay (no overwrite with zeros)
    third = synthesize_cupid(config(n_personas=2), out, factory_for(Recorder()), concurrency=1)
    again = json.loads((out / "summary.json").read_text())["usage"]
    assert third.summary["usage"]["this_invocation"]["calls"] == 0
    assert again["calls"] == usage["calls"] and again["invocations"] == 3
    assert again["per_model"][SPEC]["calls"] == usage["calls"]


def test_an_unpriced_model_under_a_budget_is_refused_unless_priced(tmp_path: Path) -> None:
    from personalign.llm import PriceTable, UsageTracker

    spec = "openai/some-unpriced-model"
    cfg = config(generator=spec, n_personas=1)
    budget = ModelFactory(cache=None, tracker=UsageTracker(max_cost_usd=1.0), backends={spec: Recorder()})
    with pytest.raises(ConfigError, match=r"no price for .*--prices"):
        synthesize_cupid(cfg, tmp_path / "a", budget)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"openai/some-unpriced-model": {"input": 1.0, "output": 2.0}}))
    priced = ModelFactory(
        cache=None,
        tracker=UsageTracker(max_cost_usd=1.0),
        prices=PriceTable.load(prices),
        backends={spec: Recorder(), str(parse_model_spec(SPEC)): Recorder()},
    )
    result = synthesize_cupid(cfg, tmp_path / "b", priced)
    assert result.summary["usage"]["per_model"][spec]["unpriced_calls"] == 0


def test_the_user_simulator_is_told_which_items_remain_and_unreferenced_items_are_recorded(
    tmp_path: Path,
) -> None:
    def silent(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = default_responder(messages, config)
        if config.schema_name == "synth_user_turn":
            data = json.loads(text)
            data["hinted_items"] = []
            return json.dumps(data)
        return text

    backend = Recorder()
    synthesize_cupid(config(n_personas=1, max_turns=3), tmp_path / "a", factory_for(backend))
    state = next(iter(states(tmp_path / "a").values()))
    first_turns = [p for p in backend.prompts if "synth_user_turn" in p and "Items you have not" in p]
    assert first_turns and any(
        "referred to yet: 1, 2" in p or "referred to yet: 1\\n" in p for p in first_turns
    )
    dialogues = [v for k, v in state["stages"].items() if k.startswith("dialogue/") and v["scores"]]
    assert dialogues and all(d["unreferenced_items"] == [] for d in dialogues)
    # a simulator that refers to nothing leaves every item on record as unreferenced
    synthesize_cupid(config(n_personas=1, max_turns=3), tmp_path / "b", factory_for(Recorder(silent)))
    state = next(iter(states(tmp_path / "b").values()))
    d = state["stages"]["dialogue/0"]
    assert d["unreferenced_items"] == list(range(1, len(d["checklist"]) + 1))


def test_a_changed_preference_must_say_what_it_overturns(tmp_path: Path) -> None:
    def no_conflict(messages: Sequence[Message], config: GenerateConfig) -> str:
        text = default_responder(messages, config)
        if config.schema_name == "synth_changed_preference":
            data = json.loads(text)
            data.pop("conflict")
            return json.dumps(data)
        return text

    result = synthesize_cupid(config(n_personas=1), tmp_path / "out", factory_for(Recorder(no_conflict)))
    assert result.summary["failed"][0]["stage"] == "changed"
    assert "conflict" in result.summary["failed"][0]["error"]
    ok = synthesize_cupid(config(n_personas=1), tmp_path / "ok", factory_for(Recorder()))
    assert next(iter(states(tmp_path / "ok").values()))["stages"]["changed"]["changed_conflict"]
    assert ok.summary["passed_validation"] == 1

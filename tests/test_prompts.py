"""Bundled prompt templates: loading, strict rendering, literal values, and no annotation leaks."""

from __future__ import annotations

import pytest

from personalign.benchmarks.cupid.context import format_history, format_session
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.judges import GENERATION_LABELS
from personalign.prompts import load_template, parse_template

TEMPLATES = {
    "cupid/infer": {"history", "request"},
    "cupid/generate": {"history", "request"},
    "cupid/generate_with_preference": {"preference", "request"},
    "cupid/summarize": {"session"},
    "cupid/decompose": {"preference"},
    "cupid/match": {"preference", "checklist"},
    "cupid/match_prefmatcher": {"preference", "checklist"},
    "cupid/judge_generation": {"preference", "checklist", "request", "response"},
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_template_loads_with_expected_placeholders(name: str) -> None:
    template = load_template(name)
    assert template.name == name
    assert template.user.strip()
    assert template.placeholders == TEMPLATES[name]
    assert len(template.sha256) == 64


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_render_substitutes_every_placeholder(name: str) -> None:
    template = load_template(name)
    values = {p: f"<<value of {p}>>" for p in template.placeholders}
    messages = template.render(**values)
    text = "\n".join(m.content for m in messages)
    for value in values.values():
        assert value in text
    assert "{{" not in text and "}}" not in text
    assert messages[-1].role == "user"
    if template.system:
        assert [m.role for m in messages] == ["system", "user"]
    else:
        assert [m.role for m in messages] == ["user"]


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_render_rejects_missing_value(name: str) -> None:
    template = load_template(name)
    values = {p: "x" for p in template.placeholders}
    values.pop(sorted(values)[0])
    with pytest.raises(KeyError):
        template.render(**values)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_render_rejects_extra_value(name: str) -> None:
    template = load_template(name)
    values = {p: "x" for p in template.placeholders}
    with pytest.raises(KeyError, match="surprise"):
        template.render(**values, surprise="y")


def test_values_inserted_literally_without_double_substitution() -> None:
    template = load_template("cupid/infer")
    history = "User said {{request}} and {history} and { and \\1 \\g<0> $1"
    messages = template.render(history=history, request="REQUEST-TEXT")
    user = messages[-1].content
    assert history in user
    assert user.count("REQUEST-TEXT") == 1
    assert "{{request}}" in user


def test_value_containing_its_own_placeholder_is_literal() -> None:
    messages = load_template("cupid/decompose").render(preference="{{preference}} {{ preference }}")
    assert "Preference: {{preference}} {{ preference }}" in messages[-1].content


def test_template_hashes_differ() -> None:
    hashes = {load_template(name).sha256 for name in TEMPLATES}
    assert len(hashes) == len(TEMPLATES)


def test_parse_template_sections_and_errors() -> None:
    template = parse_template("t", "<!-- system -->\nBe {{ tone }}.\n<!-- user -->\nSay {{word}}.\n")
    assert (template.system, template.user) == ("Be {{ tone }}.", "Say {{word}}.")
    assert template.placeholders == {"tone", "word"}
    assert [m.content for m in template.render(tone="kind", word="hi")] == ["Be kind.", "Say hi."]
    user_only = parse_template("u", "<!-- user -->\nHello")
    assert [m.role for m in user_only.render()] == ["user"]
    with pytest.raises(ValueError):
        parse_template("none", "Just text, no sections.")
    with pytest.raises(ValueError):
        parse_template("system-only", "<!-- system -->\nBe kind.")
    assert parse_template("a", "<!-- user -->\nA").sha256 != parse_template("b", "<!-- user -->\nB").sha256


def test_infer_prompt_shows_dialogues_but_no_annotations() -> None:
    template = load_template("cupid/infer")
    for instance in load_cupid("fixture").instances:
        history = format_history([format_session(s) for s in instance.prior_interactions])
        messages = template.render(history=history, request=instance.current_request)
        prompt = "\n".join(m.content for m in messages)
        assert instance.current_request in prompt
        for k, session in enumerate(instance.prior_interactions, start=1):
            assert f"### Session {k}" in prompt
            for message in session.dialogue:
                assert message.content.strip() in prompt, (instance.id, k)
            assert session.contextual_preference not in prompt, (instance.id, k)
        assert instance.current_contextual_preference not in prompt, instance.id
        for item in instance.current_checklist:
            assert item not in prompt, instance.id


def test_cupid_prompts_carry_the_official_instructions_and_no_extra_hints() -> None:
    infer = load_template("cupid/infer")
    text = (infer.system + infer.user).lower()
    assert "counts against you" in text  # wrong details are penalized
    for hint in ("opposite", "change their mind", "changed over time"):
        assert hint not in text
    assert infer.system.count('\n- "') == 4  # four example preferences
    match = load_template("cupid/match")
    assert match.system.count("\nPreference: ") == 8  # eight few-shot pairs
    assert "ten words" not in match.system
    decompose = load_template("cupid/decompose")
    assert (
        decompose.system.count("- Preference: ") == 5 and "analyse the preference first" in decompose.system
    )
    prefmatcher = load_template("cupid/match_prefmatcher")
    assert prefmatcher.user.startswith("#### Criterion\n\n{{preference}}\n\n#### Checklist\n\n")
    judge = load_template("cupid/judge_generation")
    for score, label in enumerate(GENERATION_LABELS, start=1):
        assert f"  - {score}: {label}\n" in judge.system

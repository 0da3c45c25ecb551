"""PrefEval end to end on the scripted model: summary, errors and resume, truncation, rescore, MCQ,
the paper protocol over stand-in files, the registry entry and the report."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from personalign import registry
from personalign.benchmarks.prefeval.run import rescore_prefeval, run_prefeval
from personalign.benchmarks.prefeval.spec import SPEC
from personalign.benchmarks.prefeval.steps import PrefEvalConfig
from personalign.errors import ConfigError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.llm.types import BackendResponse, Usage
from personalign.runs.lifecycle import RunSettings
from personalign.runs.store import RunDir
from personalign.types import Message
from tests.benchmarks.prefeval.standins import write_paper_checkout

CONFIG = PrefEvalConfig(subject="scripted/s", judge="scripted/j")


def settings(tmp_path: Path, name: str = "run", **changes: object) -> RunSettings:
    base = RunSettings(run_dir=tmp_path / name, cache_path=tmp_path / "c.sqlite", progress=False)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_generation_run_scores_every_instance_with_breakdowns(tmp_path: Path) -> None:
    result = run_prefeval(CONFIG, settings(tmp_path), turns=(0, 2))
    s = result.summary
    assert result.outcome.status == "complete"
    assert (s["n_instances"], s["n_scored"], s["n_errors"]) == (24, 24, 0)  # 12 rows x 2 lengths
    assert s["benchmark"] == "prefeval" and s["task"] == "generation" and s["setting"] == "zero-shot"
    assert set(s["by_form"]) == {"explicit", "choice", "persona"} and set(s["by_turns"]) == {"0", "2"}
    assert set(s["by_topic"]) == {"travel_hotel", "lifestyle_dietary"} and "explicit@2" in s["by_form_turns"]
    # The scripted subject echoes the first user turn: the explicit preference itself (followed), an
    # implicit form's unrelated first turn (violated): the metric separates them.
    assert s["by_form"]["explicit"]["accuracy"] == 1.0 and s["by_form"]["persona"]["accuracy"] < 1.0
    assert 0.0 < s["all"]["accuracy"] < 1.0 and s["all"]["ci"] is not None
    records = RunDir(tmp_path / "run").records()
    record = records["explicit/travel_hotel/0@2"]
    assert record.meta == {"form": "explicit", "topic": "travel_hotel", "index": 0, "turns": 2}
    assert set(record.steps) == {
        "pref_response",
        "generate",
        "judge/acknowledge",
        "judge/violation",
        "judge/helpful",
        "judge/hallucination",
    }
    scores = record.results["generation"].scores
    assert scores["followed"] is True and scores["checks"]["acknowledge"]["answer"] == "Yes"
    implicit = records["choice/travel_hotel/0@0"]
    assert "pref_response" not in implicit.steps
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["benchmark"] == "prefeval" and manifest["selection"]["turns"] == [0, 2]
    assert "prefeval/judge_violation" in manifest["prompts"] and manifest["data"]["n_rows"] == 12


def test_judge_failures_are_errors_and_resume_asks_only_them(tmp_path: Path) -> None:
    def bad_judge(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "prefeval_helpful" and "terrier" in messages[1].content:
            return "It is helpful, I think."  # unparseable, also on the re-ask
        return default_responder(messages, config)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": ScriptedBackend(), "scripted/j": ScriptedBackend(bad_judge)},
    )
    first = run_prefeval(CONFIG, settings(tmp_path), turns=(0,), forms=("explicit",), factory=factory)
    assert first.outcome.status == "complete_with_errors"
    assert first.summary["n_errors"] == 1 and first.summary["n_scored"] == 3
    error = first.summary["errors"]["explicit/travel_hotel/0@0"]
    assert "judge/helpful" in error and "unparseable" in error
    record = RunDir(tmp_path / "run").records()["explicit/travel_hotel/0@0"]
    assert (
        record.results["generation"].status == "error"
        and "followed" not in record.results["generation"].scores
    )
    assert "reask" in record.steps["judge/helpful"].flags

    subject, judge = ScriptedBackend(), ScriptedBackend()
    factory = ModelFactory(cache=None, backends={"scripted/s": subject, "scripted/j": judge})
    second = run_prefeval(CONFIG, settings(tmp_path), turns=(0,), forms=("explicit",), factory=factory)
    assert second.outcome.status == "complete" and second.summary["n_scored"] == 4
    assert subject.calls == 0 and judge.calls == 1  # only the failed check was asked again
    again = run_prefeval(CONFIG, settings(tmp_path), turns=(0,), forms=("explicit",), factory=factory)
    assert again.outcome.evaluated == 0 and judge.calls == 1  # a finished run returns at once


def test_a_truncated_answer_is_an_error_under_personalign(tmp_path: Path) -> None:
    def cut(messages: Sequence[Message], config: GenerateConfig) -> str | BackendResponse:
        if messages[-1].content.startswith("Which hotels"):
            return BackendResponse(text="Try the", usage=Usage(), finish_reason="length")
        return default_responder(messages, config)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"), backends={"scripted/s": ScriptedBackend(cut)}
    )
    result = run_prefeval(CONFIG, settings(tmp_path), forms=("choice",), factory=factory)
    assert result.summary["n_errors"] == 1 and "cut off" in next(iter(result.summary["errors"].values()))
    assert result.summary["flags"]["truncated"] == 1


def test_rescore_reuses_the_responses(tmp_path: Path) -> None:
    run_prefeval(replace(CONFIG, setting="self-critic"), settings(tmp_path), turns=(1,), forms=("persona",))
    subject = ScriptedBackend()
    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": subject, "scripted/k": ScriptedBackend()},
    )
    result = rescore_prefeval(
        tmp_path / "run", settings(tmp_path, "rescored"), judge="scripted/k", factory=factory
    )
    assert result.summary["n_scored"] == 4 and result.summary["models"]["judge"] == "scripted/k"
    assert subject.calls == 0
    record = RunDir(tmp_path / "rescored").records()["persona/travel_hotel/0@1"]
    assert {"generate", "critique", "revise"} <= set(record.steps) and record.steps[
        "revise"
    ].model == "scripted/s"
    with pytest.raises(ConfigError, match="needs --judge"):
        rescore_prefeval(tmp_path / "run", settings(tmp_path, "none"))


def test_mcq_run(tmp_path: Path) -> None:
    config = PrefEvalConfig(subject="scripted/s", task="mcq", setting="reminder")
    result = run_prefeval(config, settings(tmp_path), turns=(0, 5))
    s = result.summary
    assert s["metric"] == "mcq_accuracy" and (s["n_scored"], s["n_errors"]) == (24, 0)
    assert s["models"] == {"subject": "scripted/s"} and "check_rates" not in s
    record = RunDir(tmp_path / "run").records()["explicit/lifestyle_dietary/1@5"]
    scores = record.results["mcq"].scores
    assert scores["choice"] in "ABCD" and scores["correct"] == (scores["choice"] == scores["correct_choice"])
    aligned = "Khao man gai, gentle poached chicken over fragrant rice."
    assert scores["options"][" ABCD".index(scores["correct_choice"]) - 1] == aligned
    # the shuffle is fixed per instance and seed: a second run shows the same order
    again = run_prefeval(config, settings(tmp_path, "again"), turns=(0, 5))
    other = RunDir(tmp_path / "again").records()["explicit/lifestyle_dietary/1@5"]
    assert other.results["mcq"].scores["options"] == scores["options"] and again.summary["all"] == s["all"]
    with pytest.raises(ConfigError, match="self-critic setting is implemented for the generation task only"):
        PrefEvalConfig(subject="scripted/s", task="mcq", setting="self-critic")


def test_selection_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="8 inter turns need 16 distractor messages"):
        run_prefeval(CONFIG, settings(tmp_path), turns=(8,))
    with pytest.raises(ConfigError, match="distinct non-negative"):
        run_prefeval(CONFIG, settings(tmp_path), turns=(-1,))
    with pytest.raises(ConfigError, match="needs a judge"):
        PrefEvalConfig(subject="scripted/s")


def paper_responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Free-form XML answers, as the official judges and MCQ format ask for."""
    assert config.json_schema is None  # the paper protocol sends no schema
    user = messages[-1].content
    if user.startswith("ACK?"):
        return "<preference>you travel with a dog</preference>\n<answer>Yes</answer>"
    if user.startswith("VIOLATE?"):
        return "<explanation>Fine.</explanation>\n<answer>No</answer>"
    if user.startswith("HALLUCINATE?"):
        return "<explanation>Same.</explanation>\n<answer>No</answer>"
    if user.startswith("HELPFUL?"):
        return "<explanation>Gives hotels.</explanation>\n<answer>Yes</answer>"
    if "STAND-IN MCQ" in user:
        letters = re.findall(r"^([A-D])\. .*dog-friendly", user, re.MULTILINE)
        return f"<choice>{letters[0] if letters else 'A'}</choice>"
    return "A dog-friendly hotel near the river."


def test_paper_protocol_over_stand_in_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_paper_checkout(tmp_path / "official", monkeypatch)
    seen: list[GenerateConfig] = []

    def subject(messages: Sequence[Message], config: GenerateConfig) -> str:
        seen.append(config)
        assert messages[0].content == "STAND-IN SYSTEM"
        return paper_responder(messages, config)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": ScriptedBackend(subject), "scripted/j": ScriptedBackend(paper_responder)},
    )
    config = replace(CONFIG, protocol="paper")
    run = settings(tmp_path, protocol_dir=root)
    result = run_prefeval(config, run, forms=("explicit",), topics=("travel_hotel",), factory=factory)
    assert result.summary["protocol"] == "paper" and result.summary["all"]["accuracy"] == 1.0
    assert {c.max_tokens for c in seen} == {40}  # the official max_gen_tokens
    record = RunDir(tmp_path / "run").records()["explicit/travel_hotel/0@0"]
    assert record.steps["generate"].raw and record.steps["judge/hallucination"].parsed["answer"] == "No"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["upstream"]["commit"] == "50795054b5ff5f418d2b768a331d71e480f93331"
    assert "error_type/check_violation.txt" in manifest["upstream"]["files"]

    mcq = run_prefeval(
        replace(config, task="mcq", judge=None),
        settings(tmp_path, "mcq", protocol_dir=root),
        topics=("travel_hotel",),
        forms=("explicit",),
        factory=factory,
    )
    assert mcq.summary["all"]["n"] == 2 and mcq.summary["n_errors"] == 0
    assert 6 in {c.max_tokens for c in seen}  # the official max_mcq_tokens


def test_registered_spec_and_report(tmp_path: Path) -> None:
    assert "prefeval" in registry.names() and registry.get("prefeval") is SPEC
    assert SPEC.validate("fixture") == {
        "source": "fixture:prefeval_sample.json",
        "rows": 12,
        "by_form": {"explicit": 4, "choice": 4, "persona": 4},
        "topics": 2,
        "with_mcq_options": 12,
        "max_inter_turns": 7,
    }
    run_prefeval(CONFIG, settings(tmp_path, "a"), turns=(0, 2, 5))
    run_prefeval(replace(CONFIG, setting="reminder"), settings(tmp_path, "b"), turns=(0, 2, 5))
    markdown = SPEC.write_report([tmp_path / "a", tmp_path / "b"], tmp_path / "report")
    assert "PrefEval preference-following accuracy (%) by inter turns" in markdown
    assert "generation+reminder" in markdown and "| 5 turns |" in markdown
    assert (tmp_path / "report" / "prefeval_turns.png").stat().st_size > 10_000
    with pytest.raises(ConfigError, match="not a run directory"):
        SPEC.write_report([tmp_path / "missing"], tmp_path / "r2")


def test_a_cut_off_reply_to_the_preference_is_kept_as_conversation(tmp_path: Path) -> None:
    def cut(messages: Sequence[Message], config: GenerateConfig) -> str | BackendResponse:
        if len(messages) == 2 and messages[-1].content.startswith("I only stay in hotels"):
            return BackendResponse(text="Noted, dogs are", usage=Usage(), finish_reason="length")
        return default_responder(messages, config)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"), backends={"scripted/s": ScriptedBackend(cut)}
    )
    result = run_prefeval(
        CONFIG, settings(tmp_path), forms=("explicit",), topics=("travel_hotel",), factory=factory
    )
    assert result.summary["n_errors"] == 0 and result.summary["flags"]["truncated"] == 1
    record = RunDir(tmp_path / "run").records()["explicit/travel_hotel/0@0"]
    assert record.steps["pref_response"].status == "ok" and "truncated" in record.steps["pref_response"].flags

"""BenchPreS as the paper defines it: protocols, comparative completeness, categories from the
data, token budgets that fit reasoning models, truncated replies kept in the denominators."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.benchpres.judges import category_of, parse_rating_line
from personalign.benchmarks.benchpres.report import build_report
from personalign.benchmarks.benchpres.run import defaults_for, run_benchpres
from personalign.benchmarks.benchpres.steps import BenchPresConfig, summarize
from personalign.benchmarks.cupid.run import RunSettings
from personalign.errors import DataError, ParseError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.llm.types import BackendResponse
from personalign.prompts import load_template
from personalign.runs.store import RunDir
from personalign.types import Message

CONFIG = BenchPresConfig(subject="scripted/s", judge="scripted/j", completeness_judge="scripted/j", samples=1)


def settings(tmp_path: Path, name: str = "run", **changes: object) -> RunSettings:
    base = RunSettings(run_dir=tmp_path / name, cache_path=tmp_path / "c.sqlite", progress=False)
    return replace(base, **changes)  # type: ignore[arg-type]


Responder = Callable[[Sequence[Message], GenerateConfig], "str | BackendResponse"]


def with_token_limit(responder: Responder) -> Responder:
    """A server's behaviour: a reply longer than max_tokens (one token a word) is cut off there."""

    def limited(messages: Sequence[Message], config: GenerateConfig) -> str | BackendResponse:
        reply = responder(messages, config)
        text = reply.text if isinstance(reply, BackendResponse) else reply
        words = text.split(" ")
        if len(words) > config.max_tokens:
            return BackendResponse(text=" ".join(words[: config.max_tokens]), finish_reason="length")
        return BackendResponse(text=text, finish_reason="stop")

    return limited


def thinking_judge(messages: Sequence[Message], config: GenerateConfig) -> str:
    """A reasoning judge: 3,000 tokens of <think> before the answer the prompt asks for."""
    answer = default_responder(messages, config)
    return "<think>" + " ".join(["hmm"] * 3000) + "</think> " + answer


def factory_with(tmp_path: Path, judge: Responder, subject: Responder | None = None) -> ModelFactory:
    backends = {"scripted/j": ScriptedBackend(judge)}
    if subject is not None:
        backends["scripted/s"] = ScriptedBackend(subject)
    return ModelFactory(cache=CallCache(tmp_path / "c.sqlite"), backends=backends)  # type: ignore[arg-type]


# --- token budgets ----------------------------------------------------------------------------


def test_a_reasoning_judge_is_not_truncated_at_the_default_settings_and_is_parsed(tmp_path: Path) -> None:
    defaults = defaults_for("openrouter/qwen/qwen3-32b", ["openrouter/deepseek/deepseek-r1"])
    assert defaults.judge_max_tokens >= 4000 and defaults.max_tokens >= 4000
    config = replace(CONFIG, judge_max_tokens=defaults.judge_max_tokens)
    assert BenchPresConfig(subject="s", judge="j", completeness_judge="j").judge_max_tokens >= 4000
    result = run_benchpres(
        config, settings(tmp_path, limit=2), factory=factory_with(tmp_path, with_token_limit(thinking_judge))
    )
    summary = result.summary
    assert result.outcome.status == "complete"
    assert summary["n_judgement_errors"] == 0 and summary["n_judgements"] == 10
    assert summary["completeness"]["n"] == 2
    assert summary["steps"]["judge"]["truncated"] == 0 and not summary["warnings"]
    record = next(iter(RunDir(tmp_path / "run").records().values()))
    assert "inline_reasoning" in record.steps["judge/0"].flags
    assert len(record.steps["judge/0"].reasoning[0].split()) == 3000


def test_the_old_256_token_judge_budget_truncates_the_same_judge_and_says_so(tmp_path: Path) -> None:
    config = replace(CONFIG, judge_max_tokens=256)
    result = run_benchpres(
        config, settings(tmp_path, limit=2), factory=factory_with(tmp_path, with_token_limit(thinking_judge))
    )
    summary = result.summary
    # errors, not a smaller denominator: every attribute is still counted
    assert summary["n_judgement_errors"] == 8 and summary["n_judgements"] == 2  # 2 nickname-rule ones
    assert summary["steps"]["judge"]["truncated"] == 8
    assert any("cut off at the token limit" in w for w in summary["warnings"])


def test_embedded_defaults_stay_small() -> None:
    defaults = defaults_for("local/smollm2", ["local/smollm2"])
    assert (defaults.max_tokens, defaults.judge_max_tokens, defaults.samples) == (160, 256, 1)
    assert defaults_for("local/smollm2", ["openai/gpt-5-mini"]).judge_max_tokens == 4096


# --- completeness -----------------------------------------------------------------------------


def test_completeness_compares_the_message_with_the_one_written_without_memory(tmp_path: Path) -> None:
    prompts: list[tuple[str, GenerateConfig]] = []

    def subject(messages: Sequence[Message], config: GenerateConfig) -> str:
        prompts.append((messages[-1].content, config))
        return default_responder(messages, config)

    judged: list[str] = []

    def judge(messages: Sequence[Message], config: GenerateConfig) -> str:
        if config.schema_name == "benchpres_completeness":
            judged.append(messages[-1].content)
        return default_responder(messages, config)

    run_benchpres(CONFIG, settings(tmp_path, limit=1), factory=factory_with(tmp_path, judge, subject))
    with_memory = [p for p, _ in prompts if "User Knowledge Memories" in p]
    without = [(p, c) for p, c in prompts if "User Knowledge Memories" not in p]
    assert len(with_memory) == 1 and len(without) == 1
    baseline_prompt, baseline_config = without[0]
    assert baseline_prompt.startswith("Write the complete message the user needs to send to the IRS agent")
    assert baseline_config.temperature == 1.0  # sampled like the message it is compared with
    record = next(iter(RunDir(tmp_path / "run").records().values()))
    baseline = record.steps["generate_baseline"].parsed["message"]
    assert baseline in judged[0] and record.steps["generate"].parsed["message"] in judged[0]
    assert judged[0].index("with memory") < judged[0].index("without memory")


def test_rating_line_is_parsed_strictly() -> None:
    assert parse_rating_line("A misses the amount B gives.\nRating: [[3]]").rating == 3
    assert parse_rating_line("Fine.\n\n  Rating: [[5]]  \n").rating == 5
    for bad in (
        "Rating: [[3]]\nThat is my answer.",  # not the last line
        "Good.\nRating: 4",
        "Good.\nRating: [[6]]",
        "Good.\n**Rating: [[4]]**",
        '{"rating": 4}',
        "",
    ):
        with pytest.raises(ParseError):
            parse_rating_line(bad)


def test_paper_protocol_free_form_judges_and_rating_line(tmp_path: Path) -> None:
    configs: list[GenerateConfig] = []
    answers: list[str] = []

    def judge(messages: Sequence[Message], config: GenerateConfig) -> str:
        configs.append(config)
        answers.append(str(default_responder(messages, config)))
        return answers[-1]

    config = replace(CONFIG, protocol="paper")
    result = run_benchpres(config, settings(tmp_path, limit=2), factory=factory_with(tmp_path, judge))
    assert result.outcome.status == "complete"
    assert all(c.json_schema is None and c.temperature == 0.0 for c in configs)
    assert sum(a.rstrip().endswith("]]") for a in answers) == 2  # two ratings, 'Rating: [[X]]'
    assert result.summary["completeness"]["n"] == 2 and result.summary["protocol"] == "paper"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["identity"]["config"]["protocol"] == "paper" and manifest["protocol"] == "paper"
    plain = run_benchpres(CONFIG, settings(tmp_path, "plain", limit=2))
    report = build_report([tmp_path / "run", plain.run_dir.path])
    assert "protocols paper, personalign" in report.main.title
    assert any("protocol paper" in row for row in report.main.rows) and len(report.main.rows) == 2


def test_an_unparseable_rating_is_an_error_not_a_dropped_row(tmp_path: Path) -> None:
    def judge(messages: Sequence[Message], config: GenerateConfig) -> str:
        reply = str(default_responder(messages, config))
        return reply.replace("Rating: [[", "Score: [[") if "Rating: [[" in reply else reply

    result = run_benchpres(
        replace(CONFIG, protocol="paper"), settings(tmp_path, limit=2), factory=factory_with(tmp_path, judge)
    )
    assert result.summary["completeness"]["n"] == 0
    assert len(result.summary["errors"]["completeness"]) == 2
    assert result.summary["steps"]["completeness"]["errors"] == 2


def truncating_subject(messages: Sequence[Message], config: GenerateConfig) -> BackendResponse:
    text = str(default_responder(messages, config))
    if "User Knowledge Memories" in messages[-1].content:
        return BackendResponse(text=text, finish_reason="length")
    return BackendResponse(text=text, finish_reason="stop")


@pytest.mark.parametrize(("protocol", "scored"), [("personalign", False), ("paper", True)])
def test_a_truncated_subject_reply_is_an_error_or_scored_and_always_counted(
    tmp_path: Path, protocol: str, scored: bool
) -> None:
    config = replace(CONFIG, protocol=protocol)  # type: ignore[arg-type]
    factory = factory_with(tmp_path, default_responder, truncating_subject)
    summary = run_benchpres(config, settings(tmp_path, limit=2), factory=factory).summary
    assert summary["steps"]["generate"]["truncated"] == 2
    if scored:
        assert summary["n_judgements"] == 10 and not summary["errors"]["generation"]
    else:
        assert summary["n_judgements"] == 0 and len(summary["errors"]["generation"]) == 2
        assert summary["steps"]["generate"]["errors"] == 2


# --- categories -------------------------------------------------------------------------------


def test_categories_come_from_the_data_where_present(tmp_path: Path) -> None:
    rows = load_benchpres("fixture").rows
    assert all(r.preference_category is not None for r in rows)
    assert category_of(rows[0], 0) == (rows[0].preference_category[0], "data")  # type: ignore[index]
    summary = run_benchpres(CONFIG, settings(tmp_path, limit=2)).summary
    assert summary["categories"] == {"from_data": 10, "from_rule": 0, "rule_unplaced": 0}


def test_rows_without_categories_fall_back_to_the_rule_and_count_what_it_cannot_place(tmp_path: Path) -> None:
    row = load_benchpres("fixture").rows[0]
    data = row.model_dump(mode="json")
    del data["preference_category"]
    data["preference_attribute"] = [*data["preference_attribute"][:4], "keep the plot twists coming"]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(data) + "\n")
    loaded = load_benchpres(path).rows[0]
    assert category_of(loaded, 4) == ("other", "rule") and category_of(loaded, 0)[1] == "rule"
    summary = run_benchpres(CONFIG, settings(tmp_path, limit=1), data=path).summary
    assert summary["categories"] == {"from_data": 0, "from_rule": 5, "rule_unplaced": 1}


def test_a_category_column_under_another_name_is_read_and_bad_values_are_named(tmp_path: Path) -> None:
    data = load_benchpres("fixture").rows[0].model_dump(mode="json")
    data["category"] = [c.upper() for c in data.pop("preference_category")]
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(data) + "\n")
    assert load_benchpres(path).rows[0].preference_category == tuple(c.lower() for c in data["category"])
    data["category"] = ["role", "style", "tone", "markers", "mood"]
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(DataError, match=r"rows.jsonl.*preference_category\[4\]"):
        load_benchpres(path)
    data["category"] = ["role"]
    path.write_text(json.dumps(data) + "\n")
    with pytest.raises(DataError, match="preference_category has 1 entries for 5"):
        load_benchpres(path)


def test_the_judge_prompt_states_the_criterion_without_a_lenient_threshold() -> None:
    system = load_template("benchpres/judge_preference").system
    assert "even in one place" not in system and "applies the preference" in system


def test_summarize_counts_categories_of_old_records_as_rule() -> None:
    assert summarize([])["categories"] == {"from_data": 0, "from_rule": 0, "rule_unplaced": 0}


def test_reasoning_off_is_refused_at_the_start_for_a_model_that_cannot_turn_it_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from personalign.errors import ConfigError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    config = replace(CONFIG, subject="openai/o4-mini", reasoning="off")
    with pytest.raises(ConfigError, match="cannot turn reasoning off"):
        run_benchpres(config, settings(tmp_path, limit=1))
    assert not (tmp_path / "run").exists()

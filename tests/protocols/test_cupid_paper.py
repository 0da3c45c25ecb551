"""CUPID --protocol paper on stand-in upstream files (our own short texts, same layout and placeholders)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.cupid import protocol as cp
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.benchmarks.cupid.steps import CupidBenchmark, CupidConfig, CupidModels, CupidPrompts
from personalign.errors import ConfigError, ParseError
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.protocols import ProtocolError
from personalign.types import Message, Session
from tests.support.models import scripted_model

STAND_INS = {
    cp.INFERRER_YAML: (
        "system_prompt: |-\n  Guess the wish.\n"
        "user_prompt: |-\n  LOG\n\n  {interaction_log}\n\n  ASK\n\n  {curr_request}\n"
    ),
    cp.GENERATOR_YAML: (
        "system_prompt: |-\n  Answer well.\n"
        "user_prompt: |-\n  LOG\n  {interaction_log}\n  ASK\n  {curr_request}\n"
    ),
    cp.DECOMPOSER_YAML: (
        'system_prompt: |-\n  Split it. Reply {{"checklist": [...]}}\n'
        "user_prompt: |-\n  WISH\n\n  {preferences}\n"
    ),
    cp.MATCHER_YAML: (
        'system_prompt: |-\n  Label each line. Reply {{"results": []}}\n\n  SHOTS\n\n  {examples}\n'
        "user_prompt: |-\n  P\n\n  {preference}\n\n  C\n\n  {checklist}\n"
    ),
    cp.PREFMATCHER_YAML: (
        "system_prompt: |-\n  Label lines.\nuser_prompt: |-\n  P {preference}\n  C\n  {checklist}\n"
    ),
    cp.JUDGE_YAML: (
        'system_prompt: |-\n  Grade against "{preference}".\n  Items:\n  {checklist}\n'
        "user_prompt: |-\n  Q {user_request}\n  A {ai_response}\n"
    ),
    cp.MATCHER_PY: (
        "import json\n\nEXAMPLES = [\n"
        "    {'preference': 'Keep it short.', 'checklist': {'Is it short?': 1, 'Is it kind?': 0}},\n"
        "    {'preference': 'Use metric units.', 'checklist': {'Are units metric?': 0.5}},\n]\n"
    ),
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_checkout(root: Path, contents: dict[str, str] = STAND_INS) -> Path:
    for path, text in contents.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


SOURCE = replace(cp.SOURCE, files={path: sha(text) for path, text in STAND_INS.items()})


@pytest.fixture()
def paper(tmp_path: Path) -> cp.CupidPaperPrompts:
    return cp.load_paper_prompts(write_checkout(tmp_path / "up"), source=SOURCE)


def instance() -> CupidInstance:
    return load_cupid("fixture").instances[0]


def test_load_records_the_source_and_hashes(paper: cp.CupidPaperPrompts) -> None:
    assert paper.hashes() == dict(SOURCE.files)
    assert paper.source["repo"] == "kixlab/CUPID" and paper.source["commit"] == cp.SOURCE.commit
    assert paper.inferrer.label().sha256 == SOURCE.files[cp.INFERRER_YAML]
    assert len(paper.matcher_examples) == 2


def test_the_real_pins_reject_stand_ins_naming_the_file_and_fix(tmp_path: Path) -> None:
    with pytest.raises(ProtocolError, match=r"preference_inferrer.yaml has sha256 .*protocol fetch cupid"):
        cp.load_paper_prompts(write_checkout(tmp_path / "up"))


def test_missing_examples_constant_is_a_clear_error(tmp_path: Path) -> None:
    contents = dict(STAND_INS, **{cp.MATCHER_PY: "SHOTS = []\n"})
    source = replace(SOURCE, files={p: sha(t) for p, t in contents.items()})
    with pytest.raises(ProtocolError, match=r"preference_matcher.py: no top-level constant EXAMPLES"):
        cp.load_paper_prompts(write_checkout(tmp_path / "up", contents), source=source)


def test_interaction_log_layout() -> None:
    sessions = (
        Session(
            context_factor="f",
            contextual_preference="p",
            dialogue=(Message(role="user", content="Hi "), Message(role="assistant", content="Hello")),
        ),
        Session(
            context_factor="f", contextual_preference="p", dialogue=(Message(role="user", content="Again"),)
        ),
    )
    assert cp.format_interaction_log(sessions) == (
        "### Session 1\n\n#### User\n\nHi \n\n#### AI Assistant\n\nHello\n\n---\n\n"
        "### Session 2\n\n#### User\n\nAgain\n\n---"
    )


def test_messages_fill_the_official_templates(paper: cp.CupidPaperPrompts) -> None:
    infer = cp.paper_infer_messages(paper, "REQ {x}", "THE LOG")
    assert [m.role for m in infer] == ["system", "user"]
    assert infer[0].content == "Guess the wish."
    assert infer[1].content == "LOG\n\nTHE LOG\n\nASK\n\nREQ {x}"
    decompose = cp.paper_decompose_messages(paper, "Be brief.", "developer")
    assert [m.role for m in decompose] == ["developer", "user"]
    assert decompose[0].content == 'Split it. Reply {"checklist": [...]}'
    match = cp.paper_match_messages(paper, ["A?", "B?"], "Pref.", "default", "developer")
    assert match[1].content == "P\n\nPref.\n\nC\n\n1. A?\n2. B?"
    shots = match[0].content.split("SHOTS\n\n", 1)[1]
    assert shots.startswith('#### Preference\n\nKeep it short.\n\n#### Output\n\n```json\n{\n  "results": [')
    assert '"label": "Fully Covered"' in shots and '"label": "Partially Covered"' in shots
    assert shots.endswith("```\n\n---")
    prefmatcher = cp.paper_match_messages(paper, ["A?"], "Pref.", "prefmatcher", "developer")
    assert [m.role for m in prefmatcher] == ["system", "user"]  # vLLM-served upstream: always system
    judge = cp.paper_judge_messages(paper, "Q?", "Ans", "Pref.", ["A?", "B?"])
    assert judge[0].content == 'Grade against "Pref.".\nItems:\n- A?\n- B?'
    assert judge[1].content == "Q Q?\nA Ans"


def test_inferred_preference_official_rule_and_errors() -> None:
    text = "### Analysis\nx\n### Most Likely Preference\n\n  Short notes for Dana.  \nMore text\n"
    assert cp.parse_paper_inferred(text) == "Short notes for Dana."
    with pytest.raises(ParseError, match="no '### Most Likely Preference'"):
        cp.parse_paper_inferred("### Preference\nShort notes.")
    with pytest.raises(ParseError, match="nothing after"):
        cp.parse_paper_inferred("### Most Likely Preference\n")


def test_json_rules_checklist_and_match() -> None:
    assert cp.parse_paper_checklist('**Analysis**\n\nok\n\n```json\n{"checklist": ["A?", "B?"]}\n```') == [
        "A?",
        "B?",
    ]
    assert cp.parse_paper_checklist('{"checklist": []}') == []
    with pytest.raises(ParseError, match="not JSON"):
        cp.parse_paper_checklist("checklist: A?")
    results = {"results": [{"label": "Fully Covered"}, {"index": 2, "label": "Not Covered"}]}
    assert cp.parse_paper_match("```json\n" + json.dumps(results) + "\n```", 2) == [
        "Fully Covered",
        "Not Covered",
    ]
    assert cp.parse_paper_match(json.dumps([{"label": "Partially Covered"}]), 1, "prefmatcher") == [
        "Partially Covered"
    ]
    with pytest.raises(ParseError, match="1 results for 2"):
        cp.parse_paper_match(json.dumps({"results": [{"label": "Fully Covered"}]}), 2)
    with pytest.raises(ParseError, match="label 'fully covered'"):
        cp.parse_paper_match(json.dumps({"results": [{"label": "fully covered"}]}), 1)
    with pytest.raises(ParseError, match="a JSON list"):
        cp.parse_paper_match(json.dumps(results), 2, "prefmatcher")


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("### Evaluation Label\n\nGood\n\n### Evaluation Score\n\n7", 7.0),
        ("### **Evaluation Score**\n\n**8**/10", 8.0),
        ("### Evaluation Score\n9.5", 9.0),
        ("### Evaluation Score\n\n6\n\nThe response is fine.", 6.0),
    ],
)
def test_judge_score_cleanup(text: str, score: float) -> None:
    assert cp.parse_paper_judgement(text)["score"] == score


def test_judge_without_a_score_is_an_error_not_zero() -> None:
    with pytest.raises(ParseError, match="no '### Evaluation Score'"):
        cp.parse_paper_judgement("Score: 7")
    with pytest.raises(ParseError, match="not a number"):
        cp.parse_paper_judgement("### Evaluation Score\n\nSeven")


def test_config_rejects_contexts_without_official_prompts() -> None:
    with pytest.raises(ConfigError, match="no official prompt"):
        CupidConfig(
            subject="s", decomposer="j", matcher="j", judge="j", context="summaries", protocol="paper"
        )
    assert (
        CupidConfig(subject="s", decomposer="j", matcher="j", judge="j", protocol="paper").truncation
        == "score"
    )
    assert CupidConfig(subject="s", decomposer="j", matcher="j", judge="j").truncation == "error"
    with pytest.raises(ConfigError, match="needs the official prompts"):
        CupidPrompts(CupidConfig(subject="s", decomposer="j", matcher="j", judge="j", protocol="paper"))


def _official_style(messages: list[Message], _config: object) -> str:
    """Answers in the official output formats of the stand-in prompts."""
    user = messages[-1].content
    if user.startswith("LOG\n\n"):
        return "### Analysis\nRead.\n\n### Most Likely Preference\nKeep the update short.\n"
    if user.startswith("WISH"):
        return '```json\n{"checklist": ["Is it short?", "Is it an update?"]}\n```'
    if user.startswith("P\n\n"):
        n = user.count("?")
        return json.dumps({"results": [{"label": "Fully Covered"}] + [{"label": "Not Covered"}] * (n - 1)})
    if user.startswith("LOG\n"):
        return "  The short update.  "
    if user.startswith("Q "):
        return "### Evaluation Score\n\n8/10"
    raise AssertionError(user)


def _benchmark(
    tmp_path: Path, paper: cp.CupidPaperPrompts, responder: object
) -> tuple[CupidBenchmark, object]:
    backend = ScriptedBackend(responder)  # type: ignore[arg-type]
    factory, model = scripted_model(tmp_path, backend)
    config = CupidConfig(
        subject="scripted/x",
        decomposer="scripted/x",
        matcher="scripted/x",
        judge="scripted/x",
        task="both",
        protocol="paper",
        system_role="developer",
        subject_max_tokens=8192,
    )
    return CupidBenchmark(config, CupidModels(model, model, model, model), paper), factory


def test_paper_run_scores_official_replies(tmp_path: Path, paper: cp.CupidPaperPrompts) -> None:
    bench, factory = _benchmark(tmp_path, paper, _official_style)
    record = asyncio.run(bench.evaluate(instance()))
    inference = record.results["inference"]
    assert inference.status == "ok", inference.error
    n_gold = len(instance().current_checklist)
    assert inference.scores["inferred_preference"] == "Keep the update short."
    assert (inference.scores["n_pred"], inference.scores["matched_pred"]) == (2, 1.0)
    assert (inference.scores["n_gold"], inference.scores["matched_gold"]) == (n_gold, 1.0)
    generation = record.results["generation"]
    assert generation.status == "ok" and generation.scores["score"] == 8.0
    assert record.steps["infer"].prompt == f"kixlab/CUPID:{cp.INFERRER_YAML}"
    assert record.steps["infer"].prompt_sha256 == SOURCE.files[cp.INFERRER_YAML]
    factory.cache.close()  # type: ignore[attr-defined]


def test_paper_run_unparseable_reply_is_an_error_record_without_reask(
    tmp_path: Path, paper: cp.CupidPaperPrompts
) -> None:
    def responder(messages: list[Message], config: object) -> str:
        if messages[-1].content.startswith("Q "):
            return "I would give it a seven."
        return _official_style(messages, config)

    bench, factory = _benchmark(tmp_path, paper, responder)
    record = asyncio.run(bench.evaluate(instance()))
    generation = record.results["generation"]
    assert generation.status == "error" and "Evaluation Score" in (generation.error or "")
    assert record.steps["judge"].status == "error" and len(record.steps["judge"].raw) == 1
    assert record.results["inference"].status == "ok"
    factory.cache.close()  # type: ignore[attr-defined]


def test_cli_paper_run_with_unverified_files_exits_2_before_any_call(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from personalign.cli import app

    checkout = write_checkout(tmp_path / "up")
    args = ["run", "cupid", "--model", "scripted/s", "--judge", "scripted/j", "--protocol", "paper"]
    args += [
        "--protocol-dir",
        str(checkout),
        "--run-dir",
        str(tmp_path / "run"),
        "--no-progress",
        "--no-cache",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "preference_inferrer.yaml has sha256" in " ".join(result.output.split())
    assert not (tmp_path / "run").exists()


def test_cli_show_prints_each_step_with_role_headers() -> None:
    from typer.testing import CliRunner

    from personalign.cli import app

    case = instance()
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "protocol",
            "show",
            "cupid",
            "--instance",
            case.id,
            "--inferred",
            "Keep it short.",
            "--checklist",
            "Short?",
        ],
    )
    assert result.exit_code == 0, result.output
    steps = [line for line in result.output.splitlines() if line.startswith("######## ")]
    assert [line.split()[1] for line in steps] == [
        "infer", "decompose", "match/inferred->gold", "match/gold->inferred", "generate", "judge"
    ]  # fmt: skip
    assert "personalign protocol" in steps[0] and "max_tokens 1024" in steps[0]
    assert case.current_request in result.output
    assert "Preference: Keep it short.\n" in result.output and "\n1. Short?\n" in result.output
    assert "======== system ========" in result.output and "======== user ========" in result.output
    bad = runner.invoke(app, ["protocol", "show", "cupid", "--instance", "nobody#consistent"])
    assert bad.exit_code == 2 and "no instance 'nobody#consistent'" in bad.output
    bad = runner.invoke(app, ["protocol", "show", "cupid", "--instance", case.id, "--setting", "everything"])
    assert bad.exit_code == 2 and "unknown setting" in bad.output


def test_show_renders_the_calls_a_paper_run_sends(paper: cp.CupidPaperPrompts) -> None:
    from personalign.benchmarks.cupid.steps import show_calls

    config = CupidConfig(subject="s", decomposer="j", matcher="j", judge="j", protocol="paper", task="both")
    calls = show_calls(
        CupidPrompts(config, paper),
        instance(),
        "inference",
        inferred="Short.",
        checklist=["A?"],
        response="R",
    )
    assert [step for step, _, _ in calls] == [
        "infer",
        "decompose",
        "match/inferred->gold",
        "match/gold->inferred",
    ]
    infer = calls[0][2]
    log = cp.format_interaction_log(instance().prior_interactions)
    assert infer.messages == cp.paper_infer_messages(paper, instance().current_request, log)
    assert calls[2][2].messages[1].content.endswith("C\n\n1. A?")

"""`synth cupid --protocol paper` on stand-in upstream files (our own short texts, same layout and
placeholders as the official synthesis prompts), with scripted models."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from personalign.benchmarks.cupid import protocol as cp
from personalign.benchmarks.cupid import synth as cs
from personalign.benchmarks.cupid import synth_paper as sp
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.synth import CupidSynthConfig, synthesize_cupid
from personalign.errors import ConfigError, ParseError
from personalign.llm import GenerateConfig, ModelFactory, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.protocols import ProtocolError
from personalign.types import Message

STAND_INS = {
    cp.DECOMPOSER_YAML: (
        'system_prompt: |-\n  SPLIT-WISH. Reply {{"checklist": [...]}}\n'
        "user_prompt: |-\n  WISH\n\n  {preferences}\n"
    ),
    cp.USER_SIMULATOR_YAML: (
        "system_prompt: |-\n  PLAY-USER {user_profile}\n  WHEN {context_factor}\n  WANT {preference}\n"
        "  ITEMS\n  {checklist}\n"
    ),
    cp.ASSISTANT_SIMULATOR_YAML: "system_prompt: |-\n  PLAY-HELPER, be brief.\n",
    cp.PERSONA_GENERATOR_YAML: (
        'system_prompt: |-\n  MAKE-PERSONA. Reply {{"personas": [...]}}\n'
        "user_prompt: |-\n  SEEDS\n\n  {seed_descriptions}\n"
    ),
    cp.FACTORS_GENERATOR_YAML: (
        "system_prompt: |-\n  MAKE-FACTORS {n_factors}\nuser_prompt: |-\n  PERSONA\n\n  {user_persona}\n"
    ),
    cp.SESSIONS_GENERATOR_YAML: (
        "system_prompt: |-\n  MAKE-JOURNEY of {n_sessions}\n  STRUCTURE\n  {series_structure}\n"
        "  PAIR {first_factor} | {second_factor}\n"
        "user_prompt: |-\n  PERSONA\n\n  {user_persona}\n\n  FACTORS\n  {context_factors}\n"
    ),
    # our own stand-in for the official module: three structure lines built by f-strings, in order
    cp.SESSIONS_GENERATOR_PY: (
        "class Journeys:\n"
        "    def create_series_structure(self, n, a, b):\n"
        '        text = ""\n'
        "        for i in range(n):\n"
        "            if i in a[2:]:\n"
        '                text += f"- S{i+1}: A-CHANGED {{x}}\\n"\n'
        "            elif i in a:\n"
        '                text += f"- S{i+1}: A-ORIG\\n"\n'
        "            elif i in b:\n"
        '                text += f"- S{i+1}: B-ORIG\\n"\n'
        "        return text[:-1]\n"
    ),
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


SOURCE = replace(cp.SOURCE, files={path: sha(text) for path, text in STAND_INS.items()})


def checkout(root: Path) -> Path:
    for path, text in STAND_INS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


def answer(score: int, items: Sequence[int], message: str) -> str:
    """A user simulator answer in the official layout."""
    listed = "\n".join(f"- {k}. item {k}" for k in items) or "N/A"
    status = "END" if score == 10 else "CONTINUE"
    return (
        f"{sp.EVALUATION}\n\n1. ok\n\n{sp.SCORE}\n\n{score}\n\n{sp.CONTINUE_OR_END}\n\n{status}\n\n"
        f"{sp.SELECTED}\n\n{listed}\n\n{sp.THINKING}\n\nhm\n\n{sp.YOUR_MESSAGE}\n\n{message}"
    )


def factor_rows(n: int) -> list[dict[str, Any]]:
    """`n` context factors in the official layout, the contrastive pair second and third."""
    words = ["amber", "basalt", "cobalt", "dune", "ember", "fjord", "garnet", "harbor"]
    rows = []
    for k in range(n):
        related = {1: f"Factor {words[2]}", 2: f"Factor {words[1]}"}.get(k, "N/A")
        rows.append(
            {
                "factor_type": "Person",
                "background": f"Background {k}.",
                "factor": f"Factor {words[k]}",
                "task_types": ["Planning"],
                "preference_type": "Format",
                "preference": f"Answers mention {words[k]} tables with {words[k]} headings.",
                "related_factor": related,
            }
        )
    return rows


def journey(system: str, user: str) -> str:
    """A journey in the official layout following the stand-in structure lines: A the first option."""
    n = int(system.split("MAKE-JOURNEY of ")[1].split()[0])
    roles = {int(k) - 1: r for k, r in re.findall(r"^- S(\d+): (A-CHANGED|A-ORIG|B-ORIG)", system, re.M)}
    first, second = system.split("PAIR ")[1].split("\n")[0].split(" | ")
    listed = yaml.safe_load(user.split("FACTORS\n")[1])["factors"]
    pref = {f["context_factor"]: f["preference"] for f in listed}
    others = [f["context_factor"] for f in listed if f["context_factor"] not in (first, second)]
    scenarios = []
    for i in range(n):
        role = roles.get(i)
        factor = (
            first
            if role in ("A-ORIG", "A-CHANGED")
            else second
            if role == "B-ORIG"
            else others[i % len(others)]
        )
        preference = "Answers open with a quiz about lagoons." if role == "A-CHANGED" else pref[factor]
        scenarios.append(
            {
                "id": i + 1,
                "context_factor": factor,
                "preference": preference,
                "task_type": "Planning",
                "story": f"Story {i + 1}.",
                "request_with_factor_and_preference": f"Do task {i + 1}; {preference}",
                "request_with_factor": f"Help with task {i + 1}: [resource]",
                "resource": f"notes {i + 1}",
            }
        )
    return "```yaml\n" + yaml.dump({"scenarios": scenarios}, sort_keys=False) + "```"


def responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Scripted answers: the official layouts for the stand-in prompts, the default otherwise."""
    system = messages[0].content if messages and messages[0].role == "system" else ""
    if system.startswith("MAKE-PERSONA"):
        persona = {"description": "Ana Lima, 41, she/her, a careful nurse.", "occupation": "nurse"}
        return "```json\n" + json.dumps({"personas": [persona]}) + "\n```"
    if system.startswith("MAKE-FACTORS"):
        n = int(system.split()[1])
        return "```yaml\n" + yaml.dump({"context_factors": factor_rows(n)}, sort_keys=False) + "```"
    if system.startswith("MAKE-JOURNEY"):
        return journey(system, messages[1].content)
    if system.startswith("SPLIT-WISH"):
        wish = messages[1].content.split("WISH\n\n")[1]
        return "```json\n" + json.dumps({"checklist": [f"Does it {w}?" for w in wish.split()[:2]]}) + "\n```"
    if system.startswith("PLAY-USER"):
        turn = sum(1 for m in messages if m.role == "assistant") - 1  # the opening answer is not a turn
        n_items = len([line for line in system.split("ITEMS\n")[1].splitlines() if line.strip()])
        if turn == 0:
            return answer(6, [1], "Could you lean on the first point?")
        return answer(10, list(range(1, n_items + 1)), "Thanks, that covers all of it.")
    if system.startswith("PLAY-HELPER"):
        return f"Reply {len(messages)}."
    return default_responder(messages, config)


SPEC = "scripted/synth"


class Recorder(ScriptedBackend):
    def __init__(self) -> None:
        super().__init__(responder)
        self.asked: list[list[Message]] = []

    async def generate(self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float) -> Any:
        self.asked.append(list(messages))
        return await super().generate(messages, config, timeout=timeout)


def factory(backend: ScriptedBackend) -> ModelFactory:
    backends: dict[str, Backend] = {str(parse_model_spec(SPEC)): backend}
    return ModelFactory(cache=None, backends=backends)


def config(**overrides: Any) -> CupidSynthConfig:
    base: dict[str, Any] = dict(
        generator=SPEC,
        user_simulator=SPEC,
        assistant=SPEC,
        decomposer=SPEC,
        n_personas=1,
        n_factors=3,
        n_sessions=9,
        max_turns=3,
        protocol="paper",
        temperature=dict(cs.PAPER_TEMPERATURES),
    )
    return CupidSynthConfig(**{**base, **overrides})


@pytest.fixture()
def standin_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Verify against the stand-ins' hashes instead of the real pins."""
    monkeypatch.setattr(cs, "load_paper_synth_prompts", partial(sp.load_paper_synth_prompts, source=SOURCE))


# --- rendering and parsing (pure) ----------------------------------------------------------------


def prompts(tmp_path: Path) -> sp.PaperSynthPrompts:
    return sp.load_paper_synth_prompts(checkout(tmp_path / "up"), source=SOURCE)


def test_user_simulator_sees_its_own_answers_as_assistant_turns(tmp_path: Path) -> None:
    chat = [
        {"role": "user", "content": "Plan my trip."},
        {"role": "assistant", "content": "Go to Rome."},
        {"role": "user", "content": "Cheaper?"},
        {"role": "assistant", "content": "Go by train."},
    ]
    messages = sp.paper_user_messages(
        prompts(tmp_path),
        persona="Ana, a nurse",
        factor="Budget",
        preference="Spend little",
        checklist=["Is it cheap?", "Is it short?"],
        chat=chat,
        raw_turns=["RAW-1"],
    )
    system = "PLAY-USER Ana, a nurse\nWHEN Budget\nWANT Spend little\nITEMS\n1. Is it cheap?\n2. Is it short?"
    assert messages[0] == Message(role="system", content=system)
    assert [m.role for m in messages[1:]] == ["assistant", "user", "assistant", "user"]
    opening = messages[1].content
    assert opening.startswith(sp.EVALUATION) and opening.endswith(f"{sp.YOUR_MESSAGE}\n\nPlan my trip.")
    assert f"{sp.CONTINUE_OR_END}\n\nCONTINUE" in opening
    assert [m.content for m in messages[2:]] == ["Go to Rome.", "RAW-1", "Go by train."]


def test_assistant_simulator_and_decomposer_messages(tmp_path: Path) -> None:
    paper = prompts(tmp_path)
    chat = [{"role": "user", "content": "Hi"}]
    assert sp.paper_assistant_messages(paper, chat) == [
        Message(role="system", content="PLAY-HELPER, be brief."),
        Message(role="user", content="Hi"),
    ]
    assert [m.content for m in sp.paper_decomposer_messages(paper, "Be terse")] == [
        'SPLIT-WISH. Reply {"checklist": [...]}',
        "WISH\n\nBe terse",
    ]


def test_opening_fills_the_resource_placeholder() -> None:
    session = {"request_with_factor": "Fix this: [resource]\n", "resource": "x = 1"}
    assert sp.paper_opening(session) == "Fix this: x = 1\n"
    assert sp.paper_opening({**session, "request_with_factor": "Fix it."}) == "Fix it.\n\nx = 1"
    assert sp.paper_opening({**session, "resource": None}) == "Fix this: [resource]\n"


def test_parse_user_turn_by_the_official_sections() -> None:
    parsed = sp.parse_paper_user_turn(answer(7, [2, 9], "More detail please."), n_items=3)
    assert parsed == {"message": "More detail please.", "end": False, "score": 7, "hinted_items": [2]}
    assert sp.parse_paper_user_turn(answer(10, [1], "Great."), n_items=1)["end"] is True
    with pytest.raises(ParseError, match="Continue or End"):
        sp.parse_paper_user_turn("Sure, here is my message.", n_items=1)
    with pytest.raises(ParseError, match="empty"):
        sp.parse_paper_user_turn(answer(5, [], ""), n_items=1)


# --- the pipeline ----------------------------------------------------------------------------------


def test_paper_protocol_synthesis_uses_the_official_texts(tmp_path: Path, standin_pins: None) -> None:
    backend = Recorder()
    out = tmp_path / "out"
    result = synthesize_cupid(
        config(), out, factory(backend), concurrency=1, protocol_dir=checkout(tmp_path / "up")
    )
    assert result.summary["failed"] == [] and result.summary["passed_validation"] == 1
    state = json.loads(next((out / "state").glob("*.json")).read_text())
    # the decomposer, user and assistant simulators were asked with the stand-in (official) texts
    systems = {m[0].content.split()[0] for m in backend.asked if m and m[0].role == "system"}
    assert {
        "SPLIT-WISH.",
        "PLAY-USER",
        "PLAY-HELPER,",
        "MAKE-PERSONA.",
        "MAKE-FACTORS",
        "MAKE-JOURNEY",
    } <= systems
    # persona, factors and the whole journey: one official call each, read by the official parsers
    assert state["stages"]["persona"]["description"].startswith("Ana Lima")
    assert [f["related_factor"] for f in state["stages"]["factors"]] == [
        None,
        "Factor cobalt",
        "Factor basalt",
    ]
    assert steps_named(state, "sessions") == ["sessions"] and "changed" not in state["steps"]
    assert state["steps"]["sessions"]["prompt_sha256"] == SOURCE.files[cp.SESSIONS_GENERATOR_YAML]
    roles = [state["stages"][f"session/{i}"]["plan"] for i in range(9)]
    assert roles.count("A") == 2 and roles.count("A_changed") == 3 and roles[-1] == "A_changed"
    assert state["stages"]["changed"]["changed_preference"] == "Answers open with a quiz about lagoons."
    assert state["stages"]["changed"]["current_factor"] == "Factor basalt"
    first = state["stages"]["dialogue/0"]
    assert [m["role"] for m in first["chat"]] == ["user", "assistant", "user", "assistant", "user"]
    assert first["scores"] == [6, 10] and first["is_satisfied"] is True
    assert first["unreferenced_items"] == [] and len(first["user_simulator_raw"]) == 2
    checklists = state["stages"]["checklists"]
    assert all(items and items[0].startswith("Does it") for items in checklists.values())
    steps = state["steps"]
    assert steps["decompose/0"]["prompt"] == f"kixlab/CUPID:{cp.DECOMPOSER_YAML}"
    assert steps["dialogue/0/user/0"]["prompt_sha256"] == SOURCE.files[cp.USER_SIMULATOR_YAML]
    manifest = json.loads((out / "synth_manifest.json").read_text())
    assert manifest["upstream"]["files"] == SOURCE.files
    assert manifest["identity"]["upstream"]["files"] == sp.paper_pins()  # the identity: the real pins
    assert manifest["identity"]["temperature"]["factors"] == 1.0
    assert len(load_cupid(out / "cupid.jsonl").instances) == 3


def steps_named(state: dict[str, Any], prefix: str) -> list[str]:
    return [name for name in state["steps"] if name.startswith(prefix)]


def test_paper_generator_messages(tmp_path: Path) -> None:
    paper = prompts(tmp_path)
    template = {
        "id": 0,
        "seed": "A nurse.",
        "occupation": "nurse",
        "career_level": "senior",
        "personality_traits": ["High Openness"],
        "personal_values": ["Security"],
        "decision_making_styles": "Analytical",
    }
    persona = sp.paper_persona_messages(paper, template)
    assert persona[0] == Message(role="system", content='MAKE-PERSONA. Reply {"personas": [...]}')
    # a batch of one, the template as the official code prints it (without our occupation key)
    assert persona[1].content == (
        "SEEDS\n\n1. {'id': 0, 'seed': 'A nurse.', 'career_level': 'senior', 'personality_traits': "
        "['High Openness'], 'personal_values': ['Security'], 'decision_making_styles': 'Analytical'}"
    )
    assert [m.content for m in sp.paper_factors_messages(paper, "Ana", 5)] == [
        "MAKE-FACTORS 5",
        "PERSONA\n\nAna",
    ]
    assert paper.structure_lines == {
        "A_changed": "- S{number}: A-CHANGED {{x}}\n",
        "A": "- S{number}: A-ORIG\n",
        "B": "- S{number}: B-ORIG\n",
    }
    factors = sp.parse_paper_factors("```yaml\n" + yaml.dump({"context_factors": factor_rows(3)}) + "```")
    plan = ["other", "A", "B", "A", "A_changed", "B", "A_changed"]
    system, user = sp.paper_sessions_messages(paper, "Ana", factors, plan)
    assert system.content.splitlines()[:6] == [
        "MAKE-JOURNEY of 7",
        "STRUCTURE",
        "- S2: A-ORIG",
        "- S3: B-ORIG",
        "- S4: A-ORIG",
        "- S5: A-CHANGED {x}",
    ]
    assert "- S7: A-CHANGED {x}\nPAIR Factor basalt | Factor cobalt" in system.content
    assert user.content.split("FACTORS\n")[1].startswith("factors:\n- context_factor: Factor amber\n")


def test_structure_lines_need_the_three_fstrings() -> None:
    with pytest.raises(ProtocolError, match="three structure lines"):
        sp.structure_lines('def create_series_structure(n):\n    s = ""\n    s += f"- {n}\\n"\n')
    with pytest.raises(ProtocolError, match="no create_series_structure"):
        sp.structure_lines("x = 1\n")


def factors_text(rows: list[dict[str, Any]]) -> str:
    return "```yaml\n" + yaml.dump({"context_factors": rows}) + "```"


def test_parse_factors_by_the_official_rules() -> None:
    factors = sp.parse_paper_factors(factors_text(factor_rows(4)))
    assert [f["related_factor"] for f in factors] == [None, "Factor cobalt", "Factor basalt", None]
    assert factors[0]["task_types"] == ["Planning"]
    unlinked = factor_rows(3)
    unlinked[2]["related_factor"] = "N/A"
    with pytest.raises(ParseError, match="0 mutual contrastive pairs"):
        sp.parse_paper_factors(factors_text(unlinked))
    stray = factor_rows(4)
    stray[3]["related_factor"] = "Factor amber"
    with pytest.raises(ParseError, match="outside the contrastive pair"):
        sp.parse_paper_factors(factors_text(stray))
    missing = factor_rows(3)
    del missing[0]["preference"]
    with pytest.raises(ParseError, match="factor 1: 'preference' missing"):
        sp.parse_paper_factors(factors_text(missing))
    with pytest.raises(ParseError, match="not YAML"):
        sp.parse_paper_factors("```yaml\ncontext_factors: [\n```")
    with pytest.raises(ParseError, match="persona: expected a 'personas' list"):
        sp.parse_paper_persona('{"personas": []}')


def test_parse_sessions_follows_the_plan(tmp_path: Path) -> None:
    paper = prompts(tmp_path)
    factors = sp.parse_paper_factors(factors_text(factor_rows(3)))
    plan = ["other", "A", "B", "A", "A_changed", "B", "other", "A_changed", "A_changed"]
    system, user = sp.paper_sessions_messages(paper, "Ana", factors, plan)
    text = journey(system.content, user.content)
    parsed = sp.parse_paper_sessions(text, factors, plan)
    assert [s["plan"] for s in parsed["sessions"]] == plan
    assert parsed["sessions"][0]["resource"] == "notes 1" and parsed["sessions"][0]["id"] == 0
    assert parsed["info"]["contrastive_factor"] == "Factor cobalt"
    data = yaml.safe_load(text.split("```yaml\n")[1].rsplit("```", 1)[0])

    def broken(change: Any) -> str:
        rows = json.loads(json.dumps(data))
        change(rows["scenarios"])
        return "```yaml\n" + yaml.dump(rows) + "```"

    cases = [
        (lambda s: s.pop(), "8 scenarios, expected 9"),
        (lambda s: s[4].update(preference="Answers rhyme."), "changed preference differs"),
        (
            lambda s: s[2].update(preference=s[1]["preference"]),
            "contrastive factor with a different preference",
        ),
        (lambda s: s[0].update(context_factor="Factor basalt"), "outside the positions"),
        (lambda s: s[1].update(context_factor="Factor amber"), "structure puts 'Factor basalt' here"),
        (lambda s: s[6].update(context_factor="Factor zinc"), "not in the factor list"),
        (lambda s: s[-1].update(context_factor="Factor amber"), "not one of the contrastive pair"),
    ]
    for change, message in cases:
        with pytest.raises(ParseError, match=message):
            sp.parse_paper_sessions(broken(change), factors, plan)


def test_wrong_checksum_stops_before_any_call(tmp_path: Path) -> None:
    backend = Recorder()
    out = tmp_path / "out"
    with pytest.raises(ProtocolError, match=r"preference_decomposer.yaml has sha256 .*protocol fetch cupid"):
        synthesize_cupid(config(), out, factory(backend), protocol_dir=checkout(tmp_path / "up"))
    assert backend.asked == [] and not out.exists()


def test_protocol_is_part_of_the_identity_and_checked() -> None:
    ours = config(protocol="personalign").identity()
    # unchanged for our protocol, so directories written before the option existed still resume
    assert "upstream" not in ours and "protocol" not in ours
    assert config().identity()["upstream"]["commit"] == cp.SOURCE.commit
    assert config().identity()["protocol"] == "paper"
    with pytest.raises(ConfigError, match="unknown synthesis protocol"):
        config(protocol="official")


def test_cli_paper_protocol_takes_the_papers_temperatures_and_budgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from personalign.cli import app

    seen: list[CupidSynthConfig] = []

    def capture(config: CupidSynthConfig, *args: Any, **kwargs: Any) -> None:
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(cs, "synthesize_cupid", capture)
    args = ["synth", "cupid", "--out", str(tmp_path / "o"), "-g", "scripted/g", "--no-progress", "--no-cache"]
    assert CliRunner().invoke(app, [*args, "--protocol", "paper"]).exit_code == 0
    assert CliRunner().invoke(app, args).exit_code == 0
    paper, ours = seen
    assert paper.temperature["factors"] == 1.0 and ours.temperature["factors"] == 0.7
    assert {k: paper.max_tokens[k] for k in cs.PAPER_MAX_TOKENS} == cs.PAPER_MAX_TOKENS
    assert paper.max_tokens["sessions"] == 8192 and "sessions" not in ours.max_tokens
    assert ours.max_tokens["assistant"] == cs.MAX_TOKENS["assistant"]

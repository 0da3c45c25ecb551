"""HiCUPID's paper protocol on stand-in upstream files written for these tests (never the official text)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.hicupid import protocol as hp
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.run import HiCupidRunSettings, run_hicupid
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.errors import ConfigError, ParseError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.llm.types import BackendResponse
from personalign.protocols import ProtocolError, UpstreamSource
from personalign.runs.store import RunDir
from personalign.types import Message

INSTRUCTION = "STAND-IN instruction: use what the user said before."
ACK = "STAND-IN acknowledgement."


def _prompt(role: str, shots: int) -> str:
    text = f'"""\n{INSTRUCTION}\nshots={shots}\n""".strip()'
    first = f'{{"role": "{role}", "content": {text}}}'
    if role == "system":
        return f"[{first}]"
    return f'[{first}, {{"role": "assistant", "content": "{ACK}"}}]'


def _constants() -> str:
    rows = []
    for role in ("system", "user"):
        rows.append(f'    "zero/{role}": {_prompt(role, 0)},')
        rows.extend(f'    "few/{role}/{n}": {_prompt(role, n)},' for n in (1, 3, 5))
    evaluation = {
        "persona": "AB judge. The user {relation} {entity}. Q: {question}\\nA: {answer_a}\\nB: {answer_b}",
        "profile": "AB judge. Age {age}, job {occupation}; the user {relation} {entity}. "
        "Q: {question}\\nA: {answer_a}\\nB: {answer_b}",
        "schedule": "Clash judge. At {datetime}: {event}. Q: {question}\\nAnswer: {answer}",
    }
    ev = "\n".join(
        f'    "{k}": [{{"role": "user", "content": """{v}""".strip()}}],' for k, v in evaluation.items()
    )
    return (
        "import os\n\nNOT_LITERAL = os.getcwd()\n\n"
        "INFERENCE_PROMPTS = {\n" + "\n".join(rows) + "\n}\n\nEVALUATION_PROMPTS = {\n" + ev + "\n}\n"
    )


STAND_INS = {
    hp.CONSTANTS_PY: _constants(),
    hp.INFERENCE_YAML: "model: any\ntemperature: 0.6\nmax_completion_tokens: 200\n",
    hp.EVALUATION_YAML: "model: any\ntemperature: 0.0\nmax_completion_tokens: 512\n",
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def stand_in_source(**overrides: str) -> UpstreamSource:
    files = {path: sha(text) for path, text in STAND_INS.items()}
    files.update(overrides)
    return replace(hp.SOURCE, files=files)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "upstream"
    for path, text in STAND_INS.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    monkeypatch.setattr(hp, "SOURCE", stand_in_source())
    monkeypatch.delenv("PERSONALIGN_PROTOCOL_DIR_HICUPID", raising=False)
    return root


DATA = load_hicupid()


def _qa(qid: str):  # type: ignore[no-untyped-def]
    return next(q for q in DATA.qa if q.id == qid)


def test_texts_are_read_with_strip_and_sampling_from_the_configs(checkout: Path) -> None:
    texts = hp.load_paper_texts(checkout)
    assert texts.inference_prompts["zero/user"][0]["content"] == f"{INSTRUCTION}\nshots=0"
    assert texts.inference_prompts["few/system/3"][0]["role"] == "system"
    assert texts.subject == hp.Sampling(0.6, 200) and texts.judge == hp.Sampling(0.0, 512)
    assert set(texts.source["files"]) == set(STAND_INS)


def test_a_wrong_checksum_and_a_missing_constant_are_protocol_errors(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hp, "SOURCE", stand_in_source(**{hp.CONSTANTS_PY: "0" * 64}))
    with pytest.raises(ProtocolError, match=r"src/constants\.py.*sha256"):
        hp.load_paper_texts(checkout)
    with pytest.raises(ProtocolError, match="no top-level constant EVALUATION_PROMPTS"):
        hp.read_constant("INFERENCE_PROMPTS = {}\n", hp.CONSTANTS_PY, "EVALUATION_PROMPTS")
    with pytest.raises(ProtocolError, match="constant NOT_LITERAL"):
        hp.read_constant(STAND_INS[hp.CONSTANTS_PY], hp.CONSTANTS_PY, "NOT_LITERAL")


def test_subject_messages_follow_the_official_assembly() -> None:
    history = [Message(role="user", content="u1"), Message(role="assistant", content="a1")]
    system_prompt = [{"role": "system", "content": "S"}]
    user_prompt = [{"role": "user", "content": "I"}, {"role": "assistant", "content": "K"}]
    as_pairs = lambda ms: [(m.role, m.content) for m in ms]  # noqa: E731
    assert as_pairs(hp.subject_messages(system_prompt, history, "Q?")) == [
        ("system", "S"),
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "Q?"),
    ]
    assert as_pairs(hp.subject_messages(user_prompt, history, "Q?")) == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "I"),
        ("assistant", "K"),
        ("user", "Q?"),
    ]
    assert hp.prompt_key("user", 0) == "zero/user" and hp.prompt_key("system", 5) == "few/system/5"
    with pytest.raises(ConfigError, match="1, 3 or 5"):
        hp.prompt_key("user", 2)


def test_judge_messages_fill_the_metadata_and_put_the_answer_in_its_slot() -> None:
    prompt = [{"role": "user", "content": "{relation}|{entity}|{question}|{answer_a}|{answer_b}"}]
    qa = _qa("test_1/0#2")
    persona = qa.metadata.persona
    assert persona is not None
    (a,) = hp.judge_messages(prompt, qa, "MINE", "A")
    (b,) = hp.judge_messages(prompt, qa, "MINE", "B")
    head = f"{persona.relation}|{persona.entity}|{qa.question}|"
    assert a.content == head + f"MINE|{qa.personalized_answer}"
    assert b.content == head + f"{qa.personalized_answer}|MINE"
    with pytest.raises(ProtocolError, match="cannot fill"):
        hp.judge_messages([{"role": "user", "content": "{no_such_field}"}], qa, "x", "A")


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("1. Personalization: A is better.\nBetter Response: B", "B"),
        ("Better Response: B, because A ignores the user's taste", "B"),  # official greedy regex: A
        ("Better Response: Tie, both are fine but A is longer", "Tie"),
        ("**Better Response:** [a]", "A"),
        ("better response: Response B", "B"),
        ("Output Format ... Better Response: [A/B/Tie]\nBetter Response: A", "A"),
    ],
)
def test_ab_verdict_is_the_token_after_the_label(text: str, verdict: str) -> None:
    assert hp.parse_paper_ab(text) == verdict


@pytest.mark.parametrize(
    ("text", "yes"),
    [
        ("The answer names the meeting.\nSatisfaction: YES", True),
        ("Satisfaction: YES, it does not miss the clash", True),  # official greedy regex: NO ("not")
        ("Satisfaction: no", False),
        ("**Satisfaction:** NO.", False),
    ],
)
def test_schedule_verdict_is_the_token_after_the_label(text: str, yes: bool) -> None:
    assert hp.parse_paper_schedule(text) is yes


@pytest.mark.parametrize(
    "text", ["B is better.", "Better Response: [A/B/Tie]", "Better Response: Both", "Better Response:\nA"]
)
def test_an_unreadable_ab_verdict_is_an_error_not_a_tie(text: str) -> None:
    with pytest.raises(ParseError):
        hp.parse_paper_ab(text)


@pytest.mark.parametrize("text", ["YES", "Satisfaction: maybe", "Satisfaction: Not sure"])
def test_an_unreadable_schedule_verdict_is_an_error_not_a_no(text: str) -> None:
    with pytest.raises(ParseError):
        hp.parse_paper_schedule(text)


def test_history_is_ordered_by_dialogue_id() -> None:
    history = DATA.history(0)
    shuffled = history.model_copy(update={"dialogues": tuple(reversed(history.dialogues))})
    assert hp.paper_history(shuffled).dialogues == history.dialogues
    assert hp.paper_history(history) is history


def test_paper_defaults_and_checks() -> None:
    config = HiCupidConfig.for_protocol("paper", subject="scripted/s", judge="scripted/j", shots=None)
    assert (config.instruction_role, config.subject_temperature, config.subject_max_tokens) == (
        "user",
        0.6,
        200,
    )
    assert (config.judge_format, config.reasks, config.bm25, config.judge_max_tokens) == (
        "text",
        0,
        "okapi",
        512,
    )
    assert HiCupidConfig.for_protocol("personalign", subject="s/s", judge="j/j").instruction_role == "system"
    with pytest.raises(ConfigError, match="1, 3 or 5"):
        HiCupidConfig.for_protocol("paper", subject="s/s", judge="j/j", shots=2)
    with pytest.raises(ConfigError, match="text judge format"):
        HiCupidConfig.for_protocol("paper", subject="s/s", judge="j/j", judge_format="json")


class Recorder:
    """Answers like a model following the official formats; records every call."""

    def __init__(self, ab: str = "Better Response: A", schedule: str = "Satisfaction: YES") -> None:
        self.calls: list[tuple[list[Message], GenerateConfig]] = []
        self.ab, self.schedule = ab, schedule

    def __call__(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        self.calls.append((list(messages), config))
        last = messages[-1].content
        if last.startswith("AB judge"):
            return self.ab
        if last.startswith("Clash judge"):
            return self.schedule
        return "A plain answer about climbing."


def _run(tmp_path: Path, checkout: Path, recorder: Recorder, **config: object):  # type: ignore[no-untyped-def]
    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"), backends={"scripted/m": ScriptedBackend(recorder)}
    )
    cfg = HiCupidConfig.for_protocol("paper", subject="scripted/m", judge="scripted/m", **config)
    settings = HiCupidRunSettings(
        run_dir=tmp_path / "run", cache_path=tmp_path / "c.sqlite", progress=False, protocol_dir=checkout
    )
    return run_hicupid(cfg, settings, factory=factory)


def test_a_paper_run_sends_the_official_messages_and_records_the_source(
    tmp_path: Path, checkout: Path
) -> None:
    recorder = Recorder()
    result = _run(tmp_path, checkout, recorder, context="gold", shots=3)
    assert result.summary["qa"]["n_errors"] == 0 and result.summary["protocol"] == "paper"
    record = RunDir(tmp_path / "run").records()["test_1/0#2"]
    qa = _qa("test_1/0#2")
    subject = next((m, c) for m, c in recorder.calls if m[-1].content == qa.question and m[-2].content == ACK)
    messages, config = subject
    assert (config.temperature, config.max_tokens) == (0.6, 200)
    assert [m.role for m in messages[-3:]] == ["user", "assistant", "user"]
    assert messages[-3].content == f"{INSTRUCTION}\nshots=3"
    gold = [
        m.content for d in DATA.history(0).dialogues if d.dialogue_id in qa.dialogue_id for m in d.messages()
    ]
    assert [m.content for m in messages[:-3]] == gold
    judge_msgs, judge_config = next((m, c) for m, c in recorder.calls if m[-1].content.startswith("AB judge"))
    assert (judge_config.temperature, judge_config.max_tokens, judge_config.json_schema) == (0.0, 512, None)
    assert len(judge_msgs) == 1 and judge_msgs[0].role == "user"
    assert record.steps["answer"].prompt == "paper:hicupid/few/user/3"
    manifest = RunDir(tmp_path / "run").read_manifest()
    assert manifest["protocol"] == "paper" and manifest["identity"]["config"]["protocol"] == "paper"
    assert set(manifest["protocol_source"]["files"]) == set(STAND_INS)
    assert manifest["identity"]["protocol_source"]["commit"] == hp.SOURCE.commit


def test_an_unparseable_paper_verdict_is_an_error_never_scored(tmp_path: Path, checkout: Path) -> None:
    result = _run(tmp_path, checkout, Recorder(ab="I prefer the first one.", schedule="Looks fine."))
    block = result.summary["qa"]
    assert block["n_scored"] == 0 and block["n_errors"] == 18
    assert "unparseable output" in next(iter(block["errors"].values()))


def test_a_paper_run_without_the_files_names_the_fix(tmp_path: Path, checkout: Path) -> None:
    with pytest.raises(ProtocolError, match="personalign protocol fetch hicupid"):
        _run(tmp_path, tmp_path / "nowhere", Recorder())


def test_cli_protocol_show_and_a_paper_run(tmp_path: Path, checkout: Path) -> None:
    import json

    from typer.testing import CliRunner

    from personalign.cli import app

    runner = CliRunner()
    show = ["protocol", "show", "hicupid", "--instance", "test_1/0#2", "--protocol", "paper"]
    show += ["--protocol-dir", str(checkout)]
    out = runner.invoke(app, [*show, "--setting", "shots=1", "--setting", "slot=B", "--answer", "MINE"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)
    qa = _qa("test_1/0#2")
    assert shown["protocol"] == "paper" and shown["config"]["instruction_role"] == "user"
    assert [m["content"] for m in shown["subject"][-3:]] == [f"{INSTRUCTION}\nshots=1", ACK, qa.question]
    assert shown["judge"][0]["content"].endswith(f"A: {qa.personalized_answer}\nB: MINE")
    out = runner.invoke(app, [*show, "--setting", "shots=2"])
    assert out.exit_code == 2 and "1, 3 or 5" in out.output
    out = runner.invoke(app, [*show, "--setting", "temperature=1"])
    assert out.exit_code == 2 and "KEY=VALUE" in out.output
    run = [
        "run",
        "hicupid",
        "--model",
        "scripted/a",
        "--judge",
        "scripted/b",
        "--limit",
        "2",
        "--no-progress",
        "--cache",
        str(tmp_path / "c.sqlite"),
    ]
    out = runner.invoke(
        app, [*run, "--protocol", "paper", "--run-dir", str(tmp_path / "p"), "--protocol-dir", str(checkout)]
    )
    assert out.exit_code == 0, out.output
    manifest = RunDir(tmp_path / "p").read_manifest()
    assert manifest["protocol"] == "paper" and manifest["config"]["subject_temperature"] == 0.6
    out = runner.invoke(
        app, [*run, "--protocol", "paper", "--run-dir", str(tmp_path / "q"), "--protocol-dir", str(tmp_path)]
    )
    assert out.exit_code == 2 and "protocol fetch hicupid" in out.output


class Truncating(Recorder):
    """Every subject answer comes back cut off at the token limit."""

    def __call__(self, messages: Sequence[Message], config: GenerateConfig) -> str | BackendResponse:
        text = super().__call__(messages, config)
        if messages[-1].content.startswith(("AB judge", "Clash judge")):
            return text
        return BackendResponse(text=text, finish_reason="length")


def test_a_truncated_answer_is_scored_under_paper_and_an_error_under_personalign(
    tmp_path: Path, checkout: Path
) -> None:
    paper = _run(tmp_path, checkout, Truncating())
    assert paper.summary["qa"]["n_errors"] == 0  # the official code scores the text it got
    assert paper.summary["steps"]["answer"]["truncated"] == paper.summary["steps"]["answer"]["steps"] > 0
    factory = ModelFactory(
        cache=CallCache(tmp_path / "c2.sqlite"), backends={"scripted/m": ScriptedBackend(Truncating())}
    )
    cfg = HiCupidConfig.for_protocol("personalign", subject="scripted/m", judge="scripted/m")
    settings = HiCupidRunSettings(run_dir=tmp_path / "own", cache_path=tmp_path / "c2.sqlite", progress=False)
    own = run_hicupid(cfg, settings, factory=factory)
    assert own.summary["qa"]["n_scored"] == 0
    assert all("cut off at the token limit" in e for e in own.summary["qa"]["errors"].values())


def test_rescore_of_a_paper_run_reads_the_protocol_dir(tmp_path: Path, checkout: Path) -> None:
    from typer.testing import CliRunner

    from personalign.cli import app

    _run(tmp_path, checkout, Recorder())
    args = ["rescore", str(tmp_path / "run"), "--judge", "scripted/m", "--run-dir", str(tmp_path / "again")]
    args += ["--cache", str(tmp_path / "c.sqlite"), "--no-progress"]
    missing = CliRunner().invoke(app, [*args, "--protocol-dir", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "personalign protocol fetch hicupid" in " ".join(missing.output.split())
    found = CliRunner().invoke(app, [*args, "--protocol-dir", str(checkout)])
    assert found.exit_code == 0, found.output
    assert RunDir(tmp_path / "again").read_manifest()["protocol"] == "paper"

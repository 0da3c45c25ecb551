"""What the subject sees in each PrefEval setting (messages recorded from the scripted model), and
the official texts assembled from stand-in files in the official layout."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from personalign.benchmarks.prefeval.protocol import load_paper, own_texts
from personalign.benchmarks.prefeval.run import run_prefeval
from personalign.benchmarks.prefeval.steps import PrefEvalConfig
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.runs.lifecycle import RunSettings
from personalign.types import Message
from tests.benchmarks.prefeval.standins import write_paper_checkout

PREFERENCE = "I only stay in hotels that allow dogs, because my terrier travels with me everywhere."
QUESTION = "Which hotels would you suggest for a weekend in Chicago?"
TEXTS = own_texts()


def subject_calls(
    tmp_path: Path, setting: str, form: str, turns: int, **config: object
) -> list[list[Message]]:
    """The subject's calls (message lists) for travel_hotel row 0 of `form` at `turns` inter turns."""
    seen: list[list[Message]] = []

    def record(messages: Sequence[Message], cfg: GenerateConfig) -> str:
        if cfg.json_schema is None or cfg.schema_name == "prefeval_mcq":
            seen.append(list(messages))
        return default_responder(messages, cfg)

    factory = ModelFactory(
        cache=CallCache(tmp_path / "c.sqlite"),
        backends={"scripted/s": ScriptedBackend(record), "scripted/j": ScriptedBackend()},
    )
    run_prefeval(
        PrefEvalConfig(subject="scripted/s", judge="scripted/j", setting=setting, **config),  # type: ignore[arg-type]
        RunSettings(run_dir=tmp_path / setting, cache_path=tmp_path / "c.sqlite", progress=False, limit=1),
        turns=(turns,),
        forms=(form,),
        topics=("travel_hotel",),
        factory=factory,
    )
    return seen


def test_zero_shot_explicit_replies_to_the_preference_then_asks_after_the_distractors(tmp_path: Path) -> None:
    pref_call, answer_call = subject_calls(tmp_path, "zero-shot", "explicit", 2)
    assert [m.role for m in pref_call] == ["system", "user"] and pref_call[1].content == PREFERENCE
    roles = [m.role for m in answer_call]
    # system, preference + the subject's reply, 2 distractor turns, the question
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert answer_call[0].content == "You are a helpful assistant."
    assert answer_call[3].content == "How do I convert Celsius to Fahrenheit?"
    assert answer_call[-1].content == QUESTION + " (Keep your answer within 300 words.)"


def test_reminder_and_cot_wrap_the_question(tmp_path: Path) -> None:
    (call,) = subject_calls(tmp_path, "reminder", "choice", 0)
    assert [m.role for m in call] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert call[-1].content == QUESTION + TEXTS.reminder + " (Keep your answer within 300 words.)"
    (call,) = subject_calls(tmp_path, "cot", "persona", 0)
    assert len(call) == 1 + 2 * 3 + 1  # the persona's three turns
    assert call[-1].content.startswith(TEXTS.cot) and call[-1].content.count("Example ") == 5
    assert call[-1].content.endswith(QUESTION + " (Keep your answer within 300 words.)")


def test_self_critic_generates_critiques_and_revises(tmp_path: Path) -> None:
    calls = subject_calls(tmp_path, "self-critic", "choice", 1)
    first, critique, revise = calls
    assert first[-1].content.startswith(QUESTION)
    assert critique[: len(first)] == first and critique[-1].content == TEXTS.critique
    assert critique[-2].role == "assistant"
    assert revise[: len(critique)] == critique
    assert revise[-1].content == TEXTS.revision_request(QUESTION) and QUESTION in revise[-1].content


def test_rag_quotes_the_top_messages_and_keeps_the_conversation(tmp_path: Path) -> None:
    (call,) = subject_calls(tmp_path, "rag", "persona", 5, rag_k=3, rag_method="dense", embedder="hash")
    assert len(call) == 1 + 6 + 10 + 1  # system, persona turns, 5 distractor turns, question
    last = call[-1].content
    assert last.startswith(TEXTS.rag_header.replace("{k}", "3")) and "exchange 3. " in last
    assert "exchange 4. " not in last
    assert last.endswith(QUESTION + " (Keep your answer within 300 words.)")


def test_bm25_rag_quotes_only_messages_that_share_a_term(tmp_path: Path) -> None:
    (call,) = subject_calls(tmp_path, "rag", "persona", 5, rag_k=3)
    last = call[-1].content
    # only the persona's hotel message shares a word ("hotels") with the question: one excerpt
    assert last.startswith(TEXTS.rag_header.replace("{k}", "1"))
    assert "exchange 1. User: Good idea. I also travel a lot" in last and "exchange 2. " not in last


def test_memory_replaces_the_conversation_with_retrieved_sessions(tmp_path: Path) -> None:
    (call,) = subject_calls(tmp_path, "memory", "choice", 5, memory_k=2, embedder="hash")
    assert [m.role for m in call] == ["system", "user"]
    text = call[-1].content
    assert "User: Where could I stay for a short trip to Chicago?" in text  # the choice session
    assert text.count("User: ") <= 2 + 1  # two sessions: the choice exchange (2 user turns) + 1 other
    assert "My question: " + QUESTION in text


def test_mcq_shows_shuffled_lettered_options(tmp_path: Path) -> None:
    (pref, call) = subject_calls(tmp_path, "zero-shot", "explicit", 0, task="mcq")
    assert pref[1].content == PREFERENCE
    last = call[-1].content
    assert last.startswith(QUESTION) and "A. " in last and "D. " in last
    assert "The Riverside Lofts, a dog-friendly hotel with a pet walking area." in last


def test_paper_texts_come_from_the_official_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = write_paper_checkout(tmp_path / "official", monkeypatch)
    texts, budgets = load_paper(root)
    assert (budgets.max_gen_tokens, budgets.max_mcq_tokens, budgets.judge_max_tokens) == (40, 6, 30)
    assert texts.system == "STAND-IN SYSTEM" and texts.judge_system == "STAND-IN JUDGE SYSTEM"
    assert texts.question("Q?", reminder=True) == "Q? STAND-IN REMINDER. [STAND-IN LIMIT 40]"
    assert texts.question("Q?", cot=True) == "STAND-IN COT. Q? [STAND-IN LIMIT 40]"
    assert texts.rag_prefix(["User: a", "Assistant: b"]) == (
        "STAND-IN RAG HEAD\nitem 1: User: a\nitem 2: Assistant: b\nSTAND-IN RAG TAIL\n"
    )
    assert texts.critique == "STAND-IN CRITIQUE" and texts.revision_request("Q?") == "STAND-IN REVISE: Q?"
    assert texts.mcq_question("Q?", "A. x") == "Q?\nSTAND-IN MCQ\nA. x\nReply <choice>X</choice>"
    judged = texts.judge("hallucination", {"preference": "P", "assistant_restatement": "R"})
    assert judged == "HALLUCINATE? P: P\nR: R\n"
    assert texts.source is not None and set(texts.source["files"]) == set(
        __import__("tests.benchmarks.prefeval.standins", fromlist=["PAPER_FILES"]).PAPER_FILES
    )


def test_paper_texts_refuse_a_changed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from personalign.protocols.upstream import ProtocolError

    root = write_paper_checkout(tmp_path / "official", monkeypatch)
    (root / "error_type" / "check_helpful.txt").write_text("edited {question}")
    with pytest.raises(ProtocolError, match=r"check_helpful.txt has sha256"):
        load_paper(root)

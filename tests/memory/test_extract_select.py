"""Extraction and select/apply with scripted models: provenance, supersession, caching, errors."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from personalign.errors import ConfigError, ModelCallError, ParseError
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.llm.types import GenerateConfig
from personalign.memory import (
    BackgroundExtractor,
    CommunicationContext,
    MemoryEngine,
    SelectionPolicy,
    extract_pending,
    retrieve_sessions,
    select_memories,
    sessions_memory_block,
    statements_memory_block,
)
from personalign.memory.extract import parse_extraction
from personalign.memory.select import parse_apply_decision
from personalign.types import Message
from tests.support.models import run, scripted_model


def extractor_responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    """Remembers the last user turn as a preference for the name in the first user turn."""
    assert config.schema_name == "memories" and config.json_schema is not None
    user = next(m.content for m in messages if m.role == "user")
    turns = re.findall(r"^\[(\d+)\] (user|assistant): (.*)$", user, re.MULTILINE)
    if "GARBLED" in user:
        return "I think the user likes things."
    name = re.search(r"for ([A-Z]\w+ [A-Z]\w+)", turns[0][2])
    last = max(int(i) for i, role, _ in turns if role == "user")
    return json.dumps(
        {
            "memories": [
                {
                    "kind": "preference",
                    "context_factor": name.group(1) if name else "",
                    "category": "format",
                    "content": turns[last][2],
                    "evidence_turns": [last],
                }
            ]
        }
    )


def chat(request: str, feedback: str) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": request},
        {"role": "assistant", "content": "Here is a draft."},
        {"role": "user", "content": feedback},
    ]


def test_parse_extraction_is_strict() -> None:
    ok = parse_extraction(
        '{"memories": [{"kind": "fact", "context_factor": " ", "category": "", "content": "Is a biologist.",'
        ' "evidence_turns": [0, 0]}]}',
        3,
    )
    assert ok == [
        {
            "kind": "fact",
            "context_factor": "",
            "category": "general",
            "content": "Is a biologist.",
            "evidence_turns": [0],
        }
    ]
    assert parse_extraction('{"memories": []}', 3) == []
    for bad, needle in [
        ('{"memories": [{"kind": "opinion", "content": "x"}]}', "kind"),
        ('{"memories": [{"kind": "fact", "content": ""}]}', "empty content"),
        ('{"memories": [{"kind": "fact", "content": "x", "evidence_turns": [5]}]}', "do not exist"),
        ('{"memory": []}', "must be a list"),
        ("no json here", "no JSON"),
    ]:
        with pytest.raises(ParseError, match=needle):
            parse_extraction(bad, 3)
    assert parse_apply_decision('{"reason": "fits", "decision": "apply"}') == ("apply", "fits")
    with pytest.raises(ParseError):
        parse_apply_decision('{"decision": "maybe"}')


def test_extraction_provenance_supersession_cache_and_errors(tmp_path: Path) -> None:
    backend = ScriptedBackend(extractor_responder)
    factory, model = scripted_model(tmp_path, backend)
    engine = MemoryEngine(tmp_path / "m.sqlite", embedder="hash")
    engine.add_user("ana")
    s1 = engine.add_session("ana", chat("Update for Ines Okafor please.", "Raw counts first."), timestamp=1)
    engine.add_session("ana", chat("Slides for the journal club.", "GARBLED three bullets."), timestamp=2)
    s3 = engine.add_session(
        "ana", chat("New update for Ines Okafor.", "Interpretation first now."), timestamp=3
    )

    report = run(factory, engine.extract("ana", model))
    assert (report.sessions, report.memories) == (2, 2)
    assert list(report.errors) == [s1 + 1] and "unparseable" in report.errors[s1 + 1]
    assert backend.calls == 2 + 2  # the garbled session was re-asked once
    current = engine.memories("ana")
    assert [(m.content, m.session_id, m.evidence_turns) for m in current] == [
        ("Interpretation first now.", s3, (2,))
    ]
    old = [m for m in engine.memories("ana", include_superseded=True) if not m.current]
    assert [(m.content, m.session_id) for m in old] == [("Raw counts first.", s1)]
    # the failed session stays pending; a second pass re-tries only it, from the cache for the others
    factory2, model2 = scripted_model(tmp_path, ScriptedBackend(extractor_responder))
    again = run(factory2, extract_pending(engine.store, "ana", model2))
    assert again.sessions == 0 and list(again.errors) == [s1 + 1]
    assert engine.store.extraction_errors("ana", again.extractor) == again.errors
    found = engine.retrieve("ana", "Ines Okafor wants an update", include_history=True)
    assert found.matched_factor and found.memories[0].memory is not None
    assert found.memories[0].memory.content == "Interpretation first now."
    assert [m.content for m in found.memories[0].history] == ["Raw counts first."]


def test_background_extraction_does_not_block_and_lands(tmp_path: Path) -> None:
    factory, _ = scripted_model(tmp_path, ScriptedBackend(extractor_responder))
    path = tmp_path / "m.sqlite"
    engine = MemoryEngine(path, embedder="hash")
    engine.add_user("ana")
    engine.add_session("ana", chat("Update for Ines Okafor please.", "Raw counts first."))
    with BackgroundExtractor(path, "scripted/x", factory=factory) as worker:
        future = worker.submit("ana")
        report = future.result(timeout=30)
    assert report.memories == 1
    assert [m.text for m in engine.retrieve("ana", "Ines Okafor update").memories] == ["Raw counts first."]


def judge_responder(messages: Sequence[Message], config: GenerateConfig) -> str:
    assert config.schema_name == "apply"
    user = next(m.content for m in messages if m.role == "user")
    if "explode" in user:
        return "not json"
    formal = "Formality: formal" in user
    casual = any(w in user for w in ("emoji", "nickname", "pirate"))
    decision = "suppress" if formal and casual else "apply"
    return json.dumps({"reason": "judged by the script", "decision": decision})


def test_select_policies_judge_errors_and_conflicts(tmp_path: Path) -> None:
    factory, judge = scripted_model(tmp_path, ScriptedBackend(judge_responder))
    engine = MemoryEngine(tmp_path / "m.sqlite", embedder=None)
    engine.add_user("ana")
    add = engine.add_memory
    emoji = add("ana", "Use lots of emoji.", category="markers", supersede=False, valid_from=1)
    bullets = add("ana", "Prefer bullet points.", category="style", supersede=False, valid_from=2)
    bullets2 = add("ana", "Prefer numbered lists.", category="style", supersede=False, valid_from=3)
    boom = add("ana", "Answers explode with detail.", category="length", supersede=False, valid_from=4)
    nick = add("ana", "Call me Captain.", category="nickname", supersede=False, valid_from=5)
    fact = add("ana", "Works as a nurse.", kind="fact", supersede=False)
    context = CommunicationContext(recipient="bank loan officer", task="request a loan", formality="formal")
    policy = SelectionPolicy(default="judge", categories={"nickname": "suppress"})
    decisions = run(
        factory,
        select_memories([emoji, bullets, bullets2, boom, nick, fact], context, judge=judge, policy=policy),
    )
    by_id = {d.memory.id: d for d in decisions}
    assert by_id[emoji.id].decision == "suppress" and by_id[emoji.id].by == "scripted/x"
    assert by_id[bullets2.id].decision == "apply"
    assert by_id[bullets.id].decision == "suppress" and by_id[bullets.id].by == "conflict"
    assert by_id[boom.id].decision == "suppress" and by_id[boom.id].by == "error"
    assert "unparseable" in by_id[boom.id].reason
    assert by_id[nick.id].decision == "suppress" and by_id[nick.id].by == "policy"
    assert by_id[fact.id].decision == "apply"
    with pytest.raises(ConfigError, match="no judge"):
        run(factory, select_memories([emoji], context, policy=SelectionPolicy(default="judge")))
    # without a judge and without a policy, every preference applies
    (plain,) = run(factory, select_memories([emoji], context))
    assert (plain.decision, plain.by) == ("apply", "policy")
    with pytest.raises(ConfigError):
        SelectionPolicy(default="maybe")  # type: ignore[arg-type]


def test_judge_call_failure_is_recorded(tmp_path: Path) -> None:
    failing = ScriptedBackend(judge_responder, failures=[ModelCallError("boom", retryable=False)])
    factory, judge = scripted_model(tmp_path, failing)
    engine = MemoryEngine(tmp_path / "m.sqlite", embedder=None)
    engine.add_user("ana")
    memory = engine.add_memory("ana", "Be playful.", category="tone")
    (decision,) = run(factory, select_memories([memory], CommunicationContext(), judge=judge))
    assert decision.by == "error" and "model call failed" in decision.reason
    assert decision.decision == "suppress"


def test_strategy_functions(tmp_path: Path) -> None:
    sessions = [
        chat("Plan the Ridgeback journal club slides.", "Three bullets per slide."),
        chat("Update for Ines Okafor please.", "Raw counts first."),
        chat("Log the Cedar Cove survey.", "Use a table."),
        chat("Another update for Ines Okafor.", "Interpretation first now."),
    ]
    assert retrieve_sessions(sessions, "Ines Okafor asked for the August update", k=2, embedder="hash") == [
        3,
        1,
    ]
    factory, model = scripted_model(tmp_path, ScriptedBackend(extractor_responder))
    block = run(
        factory,
        sessions_memory_block(
            sessions, "Ines Okafor asked for the August update", extractor=model, embedder="hash"
        ),
    )
    assert "(Ines Okafor) Interpretation first now." in block.text
    assert "Raw counts first." not in block.text  # superseded
    assert "journal club" not in block.text.lower()
    raw = run(factory, sessions_memory_block(sessions, "Cedar Cove survey log", k=1, embedder="hash"))
    assert "Use a table." in raw.text and "### Session 1" in raw.text


def test_statements_block_applies_only_what_fits(tmp_path: Path) -> None:
    factory, judge = scripted_model(tmp_path, ScriptedBackend(judge_responder))
    context = CommunicationContext(recipient="landlord", task="ask for a repair", formality="formal")
    block = run(
        factory,
        statements_memory_block(
            "Write to my landlord about the broken heater.",
            context,
            facts=["I am 42 years old.", "I rent a flat in Leeds."],
            preferences=[("markers", "Use emoji in every message."), ("style", "Keep messages brief.")],
            judge=judge,
        ),
    )
    assert "I rent a flat in Leeds." in block.text and "Keep messages brief." in block.text
    assert "emoji" not in block.text
    assert [d.decision for d in block.decisions if d.memory.kind == "preference"] == ["suppress", "apply"]

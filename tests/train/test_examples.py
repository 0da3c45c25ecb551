"""Training examples are prompted exactly as a HiCUPID run prompts its subject."""

from __future__ import annotations

import asyncio

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.steps import TEMPLATES, build_messages
from personalign.prompts import load_template
from personalign.train.examples import build_examples, examples_sha256


def test_examples_follow_the_run_prompt_for_each_context_and_role() -> None:
    data = load_hicupid("fixture")
    train = data.questions(["train"])
    instruction = load_template(TEMPLATES["instruction"]).user
    ack = load_template(TEMPLATES["acknowledge"]).user
    for role in ("system", "user"):
        examples = asyncio.run(build_examples(data, context="full", instruction_role=role))
        assert len(examples) == len(train)
        for ex, qa in zip(examples, train, strict=True):
            history = [m for d in data.history(qa.user_id).dialogues for m in d.messages()]
            assert ex.prompt == build_messages(history, qa.question, instruction, role, ack)
            assert ex.suffix[-1].content == qa.question
            assert ex.chosen == qa.personalized_answer and ex.rejected == qa.general_answer


def test_gold_context_keeps_only_gold_dialogues_and_changes_the_hash() -> None:
    data = load_hicupid("fixture")
    full = asyncio.run(build_examples(data, context="full"))
    gold = asyncio.run(build_examples(data, context="gold"))
    assert all(len(g.history) <= len(f.history) for g, f in zip(gold, full, strict=True))
    assert any(len(g.history) < len(f.history) for g, f in zip(gold, full, strict=True))
    assert examples_sha256(full) != examples_sha256(gold)
    assert examples_sha256(full) == examples_sha256(asyncio.run(build_examples(data, context="full")))


def test_rounds_start_at_user_turns() -> None:
    data = load_hicupid("fixture")
    ex = asyncio.run(build_examples(data, context="full"))[0]
    rounds = ex.rounds()
    assert all(r[0].role == "user" for r in rounds)
    assert sum(len(r) for r in rounds) == len(ex.history)
    assert ex.drop_oldest(len(rounds)).history == ()
    assert ex.drop_oldest(1).suffix == ex.suffix

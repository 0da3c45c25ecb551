"""The collator's defects to avoid (issue 15): BOS inside the answer, end-of-turn replaced by EOS,
right truncation that loses the question, truncation that cuts the prompt mid-turn."""

from __future__ import annotations

import pytest

from personalign.errors import ConfigError
from personalign.train.examples import TrainExample
from personalign.train.tokenize import IGNORE_INDEX, dpo_record, fit, tokenize_sft
from personalign.types import Message
from tests.train.fake_tokenizer import BOS, EOS, EOT, FakeTokenizer


def example(n_rounds: int = 3, chosen: str = "Since you climb, try a crag.") -> TrainExample:
    history: list[Message] = []
    for i in range(n_rounds):
        history.append(Message(role="user", content=f"round {i} user words here"))
        history.append(Message(role="assistant", content=f"round {i} assistant reply"))
    return TrainExample(
        id="train/0#0",
        prefix=(Message(role="system", content="Personalize."),),
        history=tuple(history),
        suffix=(Message(role="user", content="What should I do this weekend?"),),
        chosen=chosen,
        rejected="Read a book.",
    )


def labelled(tok: FakeTokenizer, labels: list[int]) -> str:
    return tok.decode([t for t in labels if t != IGNORE_INDEX])


def test_loss_covers_exactly_the_answer_and_its_end_of_turn() -> None:
    tok = FakeTokenizer()
    ex = example()
    out = tokenize_sft(tok, ex, None)
    assert labelled(tok, out.labels) == ex.chosen + EOT
    assert len(out.labels) == len(out.input_ids)
    # the prompt (system, history, question, generation prompt) is masked
    assert out.labels[: out.labels.index(next(t for t in out.labels if t != IGNORE_INDEX))] == [
        IGNORE_INDEX
    ] * out.labels.index(next(t for t in out.labels if t != IGNORE_INDEX))


def test_no_bos_inside_the_answer_and_one_bos_overall() -> None:
    tok = FakeTokenizer()
    out = tokenize_sft(tok, example(), None)
    assert out.input_ids.count(tok.bos_token_id) == 1
    assert out.input_ids[0] == tok.bos_token_id
    assert tok.bos_token_id not in [t for t in out.labels if t != IGNORE_INDEX]


def test_end_of_turn_is_kept_not_replaced_by_eos() -> None:
    tok = FakeTokenizer()
    out = tokenize_sft(tok, example(), None)
    answer_ids = [t for t in out.labels if t != IGNORE_INDEX]
    assert answer_ids[-1] == tok.vocab[EOT]
    assert EOS not in tok.decode(answer_ids)


def test_sequence_is_the_template_rendered_once() -> None:
    tok = FakeTokenizer()
    ex = example()
    out = tokenize_sft(tok, ex, None)
    conv = [{"role": m.role, "content": m.content} for m in ex.prompt]
    conv.append({"role": "assistant", "content": ex.chosen})
    assert tok.decode(out.input_ids) == tok.apply_chat_template(conv)
    assert tok.decode(out.input_ids).count(BOS) == 1


def test_over_long_history_is_cut_from_the_left_at_turn_boundaries_keeping_the_question() -> None:
    tok = FakeTokenizer()
    ex = example(n_rounds=6)
    full = len(tokenize_sft(tok, ex, None).input_ids)
    out = tokenize_sft(tok, ex, full - 5)
    assert len(out.input_ids) <= full - 5
    assert out.dropped_rounds >= 1
    text = tok.decode(out.input_ids)
    assert "What should I do this weekend?" in text  # the question survives
    assert "Personalize." in text  # so does the instruction
    assert "round 0 user" not in text  # the oldest round went first
    assert "round 5 user words here" in text and "round 5 assistant reply" in text  # the newest stays whole
    assert labelled(tok, out.labels) == ex.chosen + EOT


def test_truncation_drops_the_fewest_rounds_that_fit() -> None:
    tok = FakeTokenizer()
    ex = example(n_rounds=6)
    lengths = [len(tokenize_sft(tok, ex.drop_oldest(n), None).input_ids) for n in range(7)]
    budget = lengths[2]
    fitted, dropped = fit(tok, ex, budget, [ex.chosen])
    assert dropped == 2
    assert fitted.history == ex.history[4:]


def test_no_history_left_and_still_too_long_is_an_error_not_a_cut_question() -> None:
    tok = FakeTokenizer()
    with pytest.raises(ConfigError, match=r"train/0#0.*--max-length"):
        tokenize_sft(tok, example(), 5)


def test_dpo_truncation_fits_both_answers_and_keeps_the_prompt_start() -> None:
    tok = FakeTokenizer()
    ex = example(n_rounds=6)
    long_rejected = TrainExample(
        ex.id, ex.prefix, ex.history, ex.suffix, ex.chosen, "a much longer general answer " * 4
    )
    budget = len(tokenize_sft(tok, ex, None).input_ids) - 3
    row = dpo_record(tok, long_rejected, budget)
    assert row["prompt"][0] == {"role": "system", "content": "Personalize."}
    assert row["prompt"][-1] == {"role": "user", "content": "What should I do this weekend?"}
    for key in ("chosen", "rejected"):
        text = tok.apply_chat_template(row["prompt"] + row[key])
        assert len(tok(text, add_special_tokens=False)["input_ids"]) <= budget
    # history starts at a user turn: cut at a turn boundary, never mid-round
    assert row["prompt"][1]["role"] == "user"
    assert row["dropped_rounds"] > 0


def test_a_dpo_example_that_fits_is_not_truncated_at_all() -> None:
    tok = FakeTokenizer()
    ex = example(n_rounds=6)
    row = dpo_record(tok, ex, 10_000)
    assert row["dropped_rounds"] == 0
    assert len(row["prompt"]) == len(ex.prompt)

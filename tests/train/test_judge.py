"""Judge distillation: the calls are rebuilt exactly as the HiCUPID run sent them, the verdicts and
the S they give are compared question by question, and unparseable student replies are reported."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from personalign.benchmarks.hicupid.run import hicupid_settings, run_hicupid
from personalign.benchmarks.hicupid.steps import HiCupidConfig
from personalign.errors import ConfigError, DataError
from personalign.llm import CallCache, GenerateConfig, ModelFactory
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.train.distil import DistilItem, agreement_report, pearson, student_labels
from personalign.train.judge import judge_items, parse_verdict, question_scores, score_report
from personalign.types import Message


def _run(tmp: Path, both_orders: bool) -> tuple[Path, list[list[Message]]]:
    seen: list[list[Message]] = []

    def spy(messages: Sequence[Message], config: GenerateConfig) -> str:
        seen.append(list(messages))
        return default_responder(messages, config)  # type: ignore[return-value]

    factory = ModelFactory(cache=CallCache(tmp / "c.sqlite"), backends={"scripted/j": ScriptedBackend(spy)})
    config = HiCupidConfig(subject="scripted/s", judge="scripted/j", both_orders=both_orders)
    settings = hicupid_settings(run_dir=tmp / "run", cache_path=tmp / "c.sqlite", progress=False)
    run_hicupid(config, settings, factory=factory)
    return tmp / "run", seen


@pytest.fixture(scope="module")
def hicupid_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[Message]]]:
    """A finished scripted HiCUPID run (single order), and every message list its judge received."""
    return _run(tmp_path_factory.mktemp("hicupid"), both_orders=False)


def _dump(messages: Sequence[Message]) -> str:
    return json.dumps([m.model_dump() for m in messages])


def test_items_are_the_calls_the_judge_received(hicupid_run: tuple[Path, list[list[Message]]]) -> None:
    run_dir, seen = hicupid_run
    items = judge_items(run_dir)
    assert items and seen
    assert {_dump(i.messages) for i in items} == {_dump(s) for s in seen}
    samples = {
        s["instance_id"]: s for s in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines())
    }
    kinds = set()
    for item in items:
        step = samples[item.instance_id]["steps"][item.step]
        assert item.target == step["raw"][-1]
        kinds.add(item.meta["type"])
        if item.meta["type"] == "schedule":
            assert item.labels == ("YES" if step["parsed"] else "NO",)
        else:
            assert item.labels == (step["parsed"],)
            assert item.meta["slot"] == samples[item.instance_id]["results"]["qa"]["scores"]["model_slot"]
    assert kinds == {"persona", "profile", "schedule"}


def test_teacher_scores_are_the_runs_scores(hicupid_run: tuple[Path, list[list[Message]]]) -> None:
    run_dir, _ = hicupid_run
    items = judge_items(run_dir)
    scores = question_scores(items, [i.labels for i in items])
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    for s in samples:
        assert scores[s["instance_id"]] == (s["meta"]["type"], s["results"]["qa"]["scores"]["score"])


def test_both_orders_are_distilled_and_combined_like_the_run(tmp_path: Path) -> None:
    run_dir, seen = _run(tmp_path, both_orders=True)
    items = judge_items(run_dir)
    assert {i.step for i in items} == {"judge/model=A", "judge/model=B", "judge"}  # judge: schedule only
    assert {_dump(i.messages) for i in items} == {_dump(s) for s in seen}
    scores = question_scores(items, [i.labels for i in items])
    for s in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines()):
        assert scores[s["instance_id"]] == (s["meta"]["type"], s["results"]["qa"]["scores"]["score"])


def test_a_perfect_student_agrees_and_an_unparseable_one_is_reported(
    hicupid_run: tuple[Path, list[list[Message]]],
) -> None:
    items = judge_items(hicupid_run[0])
    perfect = student_labels(items, [i.target for i in items], parse_verdict)
    assert perfect == [i.labels for i in items]
    report = agreement_report(items, perfect)
    assert report["accuracy"] == 1.0 and report["unparseable_calls"] == 0
    s = score_report(items, perfect)["s"]
    assert s["compared"] == s["questions"] and s["teacher"] == s["student"]

    broken = student_labels(items, ["I prefer the first one."] + [i.target for i in items[1:]], parse_verdict)
    assert broken[0] is None
    report = agreement_report(items, broken)
    assert report["unparseable_calls"] == 1
    assert report["accuracy"] == pytest.approx((len(items) - 1) / len(items))
    s = score_report(items, broken)["s"]
    assert s["unparseable_questions"] == 1 and s["compared"] == s["questions"] - 1


def test_s_correlation_follows_the_student_verdicts() -> None:
    def item(i: int, label: str) -> DistilItem:
        return DistilItem(
            f"q{i}",
            "judge",
            (Message(role="user", content="x"),),
            "",
            (label,),
            {"type": "persona", "slot": "A"},
        )

    items = [item(0, "A"), item(1, "B"), item(2, "Tie"), item(3, "A")]
    same = score_report(items, [("A",), ("B",), ("Tie",), ("A",)])["s"]
    assert same["pearson"] == pytest.approx(1.0)
    assert same["teacher"]["mean"] == pytest.approx(2.5 / 4)
    flipped = score_report(items, [("B",), ("A",), ("Tie",), ("B",)])["s"]
    assert flipped["pearson"] == pytest.approx(-1.0)
    assert flipped["student"]["mean"] == pytest.approx(1.5 / 4)
    assert pearson([1.0, 1.0], [0.0, 1.0]) is None  # a constant side has no correlation


def test_a_non_hicupid_or_missing_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a run directory"):
        judge_items(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"benchmark": "cupid"}))
    (tmp_path / "samples.jsonl").write_text("")
    with pytest.raises(DataError, match="not a HiCUPID run"):
        judge_items(tmp_path)


def test_an_unknown_question_names_the_file_row_and_field(
    hicupid_run: tuple[Path, list[list[Message]]], tmp_path: Path
) -> None:
    run_dir = hicupid_run[0]
    (tmp_path / "manifest.json").write_text((run_dir / "manifest.json").read_text())
    rows = (run_dir / "samples.jsonl").read_text().splitlines()
    bad = json.loads(rows[1])
    bad["instance_id"] = "test_1/999#1"
    (tmp_path / "samples.jsonl").write_text("\n".join([rows[0], json.dumps(bad)]) + "\n")
    with pytest.raises(DataError, match=r"samples\.jsonl.*2.*instance_id"):
        judge_items(tmp_path)


@pytest.mark.slow
def test_train_judge_reports_held_out_agreement_and_s(
    hicupid_run: tuple[Path, list[list[Message]]], tiny_llama: Path, tmp_path: Path
) -> None:
    from personalign.train.recipes import train_judge
    from personalign.train.settings import LoraSettings, TrainSettings

    settings = TrainSettings(
        kind="sft", learning_rate=1e-3, max_steps=1, max_length=None, save_steps=100,
        lora=LoraSettings(r=4, alpha=8, dropout=0.0), gradient_checkpointing=False,
    )  # fmt: skip
    report = train_judge(
        hicupid_run[0], str(tiny_llama), tmp_path / "j", settings, held_out_fraction=0.3, max_tokens=8
    )
    held = report["held_out"]
    assert isinstance(held, dict)
    assert held["calls"] > 0 and held["items"] == held["calls"]
    # 8 tokens of a random tiny model never make a verdict: all unparseable, none compared for S
    assert held["unparseable_calls"] == held["calls"] and held["accuracy"] == 0.0
    s = report["s"]
    assert isinstance(s, dict) and s["compared"] == 0 and s["unparseable_questions"] == s["questions"]
    saved = json.loads((tmp_path / "j" / "agreement.json").read_text())
    assert saved["held_out"] == held and saved["s"] == s
    assert len((tmp_path / "j" / "held_out_replies.jsonl").read_text().splitlines()) == held["calls"]

"""Distil a finished HiCUPID run's judge into a small model (the paper's proxy-judge idea) and
report the student's agreement with the teacher on held-out questions.

Every accepted judge call of the run (the A/B comparison with the model's answer in its slot, or
the schedule YES/NO check; both orders when the run judged both) is rebuilt with the run's own
prompts from the question and the subject's answer in ``samples.jsonl``; the student learns the
teacher's reply. Besides the verdict agreement (accuracy, Cohen's kappa, from
`personalign.train.distil`), the report compares the score S each judge gives the run: per
question (win 1, tie 0.5, loss 0, combined over both orders as in a run) and the paper's total,
with the Pearson correlation of the per-question scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.judges import (
    OUTCOME_SCORES,
    Outcome,
    combine_orders,
    model_slot,
    outcome_for,
    parse_ab_verdict,
    parse_schedule_verdict,
)
from personalign.benchmarks.hicupid.metrics import total_from_types
from personalign.benchmarks.hicupid.steps import HiCupidBenchmark, HiCupidConfig
from personalign.errors import ConfigError, DataError
from personalign.train.distil import DistilItem, data_source, pearson, read_run

JUDGE_STEPS: dict[str, Literal["A", "B"] | None] = {
    "judge": None,  # single order: the slot is the run's (results.qa.scores.model_slot)
    "judge/model=A": "A",
    "judge/model=B": "B",
}


def _config(manifest: dict[str, Any], path: Path) -> HiCupidConfig:
    if manifest.get("benchmark") != "hicupid":
        raise DataError(
            str(path), None, "benchmark", "not a HiCUPID run (train judge distils HiCUPID judges)"
        )
    raw = manifest.get("config") or {}
    known = {f.name for f in fields(HiCupidConfig)}
    config = HiCupidConfig(**{k: v for k, v in raw.items() if k in known})
    if config.protocol != "personalign":
        raise DataError(str(path), None, "config.protocol", "only personalign-protocol runs can be distilled")
    return config


def judge_items(run_dir: Path, data: str | None = None) -> list[DistilItem]:
    """Every accepted judge call of a finished HiCUPID run, rebuilt with the run's prompts; labels =
    (the verdict,): A, B or Tie, or YES / NO for schedule questions."""
    manifest, samples_path, samples = read_run(run_dir)
    config = _config(manifest, run_dir / "manifest.json")
    source = data or data_source(manifest)
    dataset = load_hicupid(source)
    questions = {qa.id: qa for qa in dataset.qa}
    seed = int(manifest.get("seed", 0))
    bench = HiCupidBenchmark(config, {}, dataset, seed)
    items: list[DistilItem] = []
    for row, sample in samples:
        qa = questions.get(str(sample.get("instance_id")))
        if qa is None:
            raise DataError(
                str(samples_path), row, "instance_id", f"{sample.get('instance_id')!r} is not in {source}"
            )
        steps = sample.get("steps", {})
        answer = steps.get("answer", {})
        if answer.get("status") != "ok" or not isinstance(answer.get("parsed"), str):
            continue
        scores = ((sample.get("results") or {}).get("qa") or {}).get("scores") or {}
        for step, fixed_slot in JUDGE_STEPS.items():
            record = steps.get(step, {})
            if record.get("status") != "ok" or not record.get("raw") or record.get("parsed") is None:
                continue
            slot = fixed_slot or scores.get("model_slot") or model_slot(seed, qa.id)
            if slot not in ("A", "B"):
                raise DataError(str(samples_path), row, "results.qa.scores.model_slot", f"{slot!r}")
            template, values, _ = bench.judge_request(qa, answer["parsed"], slot)
            parsed = record["parsed"]
            label = ("YES" if parsed else "NO") if qa.type == "schedule" else str(parsed)
            if label not in ("A", "B", "Tie", "YES", "NO"):
                raise DataError(str(samples_path), row, f"steps.{step}.parsed", f"not a verdict: {parsed!r}")
            items.append(
                DistilItem(
                    qa.id,
                    step,
                    tuple(template.render(**values)),
                    str(record["raw"][-1]),
                    (label,),
                    {"type": qa.type, "slot": slot},
                )
            )
    if not items:
        raise ConfigError(f"{samples_path}: no accepted judge calls to distil")
    return items


def parse_verdict(reply: str, item: DistilItem) -> tuple[str, ...]:
    """The judge reply parser as a distil `ParseLabels` (the run's own parsers)."""
    if item.meta.get("type") == "schedule":
        return ("YES" if parse_schedule_verdict(reply) else "NO",)
    return (parse_ab_verdict(reply),)


def call_outcome(item: DistilItem, label: str) -> Outcome:
    """The model's outcome the verdict ``label`` gives in this call."""
    if item.meta.get("type") == "schedule":
        return "win" if label == "YES" else "loss"
    return outcome_for(label, item.meta["slot"])  # type: ignore[arg-type]


def question_scores(
    items: Sequence[DistilItem], labels: Sequence[tuple[str, ...] | None]
) -> dict[str, tuple[str, float] | None]:
    """Per question: (type, S) from its calls' verdicts, both orders combined as a run does; None
    when a verdict is missing (an unparseable reply)."""
    outcomes: dict[str, list[Outcome] | None] = {}
    kinds: dict[str, str] = {}
    for item, given in zip(items, labels, strict=True):
        kinds[item.instance_id] = str(item.meta.get("type"))
        current = outcomes.setdefault(item.instance_id, [])
        if given is None or current is None:
            outcomes[item.instance_id] = None
            continue
        current.append(call_outcome(item, given[0]))
    out: dict[str, tuple[str, float] | None] = {}
    for qid, found in outcomes.items():
        if found is None:
            out[qid] = None
            continue
        outcome = found[0] if len(found) == 1 else combine_orders(found[0], found[1])[0]
        out[qid] = (kinds[qid], OUTCOME_SCORES[outcome])
    return out


def _total(scored: Sequence[tuple[str, float]]) -> dict[str, Any]:
    by_type: dict[str, float | None] = {}
    for kind in ("persona", "profile", "schedule"):
        values = [s for k, s in scored if k == kind]
        by_type[kind] = sum(values) / len(values) if values else None
    mean = sum(s for _, s in scored) / len(scored) if scored else None
    return {"mean": mean, "by_type": by_type, "total": total_from_types(by_type)}


def score_report(items: Sequence[DistilItem], labels: Sequence[tuple[str, ...] | None]) -> dict[str, Any]:
    """Teacher vs student S on the held-out questions both judged (per question, per type, the
    paper's total) and the Pearson correlation of the per-question scores."""
    teacher = question_scores(items, [i.labels for i in items])
    student = question_scores(items, labels)
    both = [qid for qid, s in student.items() if s is not None and teacher[qid] is not None]
    t = [teacher[q] for q in both]
    s = [student[q] for q in both]
    return {
        "s": {
            "questions": len(teacher),
            "compared": len(both),
            "unparseable_questions": len(teacher) - len(both),
            "teacher": _total([x for x in t if x is not None]),
            "student": _total([x for x in s if x is not None]),
            "pearson": pearson([x[1] for x in t if x], [x[1] for x in s if x]),
        }
    }

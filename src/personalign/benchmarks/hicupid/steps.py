"""HiCUPID: answer a user's question from their long dialogue history, judged against a
personalized reference answer.

Per question: a context strategy picks the history the subject sees; the subject answers; a
judge then compares the answer with `personalized_answer` (persona and multi-info questions, A/B
with a seeded position, optionally in both orders) or checks that it acknowledges the user's
conflicting event (schedule questions, YES/NO). BLEU and ROUGE-L against the reference and, for
retrieval strategies, Hit@k against the gold dialogues are recorded too.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from personalign.benchmarks.hicupid.context import (
    BM25_VARIANTS,
    BM25Variant,
    ContextOptions,
    ContextSelection,
    check_context,
    hit_at_k,
    hit_groups,
    make_context,
)
from personalign.benchmarks.hicupid.data import HiCupidDataset
from personalign.benchmarks.hicupid.judges import (
    AB_SCHEMA,
    JUDGE_FORMATS,
    OUTCOME_SCORES,
    SCHEDULE_SCHEMA,
    JudgeFormat,
    Outcome,
    combine_orders,
    model_slot,
    outcome_for,
    parse_ab_verdict,
    parse_schedule_verdict,
)
from personalign.benchmarks.hicupid.metrics import bleu, retrieval_total, rouge_l, total_from_types, wtl
from personalign.benchmarks.hicupid.protocol import (
    PaperTexts,
    judge_messages,
    load_paper_texts,
    paper_history,
    parse_paper_ab,
    parse_paper_schedule,
    subject_messages,
)
from personalign.benchmarks.hicupid.protocol import prompt_key as paper_prompt_key
from personalign.benchmarks.hicupid.schema import QUESTION_TYPES, HiCupidHistory, HiCupidQA
from personalign.errors import ConfigError, ModelCallError, ParseError
from personalign.llm.model import Model
from personalign.llm.types import GenerateConfig
from personalign.metrics.bootstrap import mean_with_ci
from personalign.prompts import PromptTemplate, load_template
from personalign.protocols.upstream import PROTOCOLS, Protocol
from personalign.retrieval import DEFAULT_EMBEDDER
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import StepFailed, StepRunner, gather_steps
from personalign.types import Message

InstructionRole = Literal["system", "user"]
TASK = "qa"
SUBJECT_STEPS = ("answer",)

TEMPLATES = {
    "instruction": "hicupid/instruction",
    "few_shot": "hicupid/few_shot",
    "acknowledge": "hicupid/acknowledge",
    "judge_ab": "hicupid/judge_ab",
    "judge_schedule": "hicupid/judge_schedule",
    "format_ab_json": "hicupid/format_ab_json",
    "format_ab_text": "hicupid/format_ab_text",
    "format_schedule_json": "hicupid/format_schedule_json",
    "format_schedule_text": "hicupid/format_schedule_text",
}


@dataclass(frozen=True)
class HiCupidConfig:
    """Everything that defines a HiCUPID run's results (recorded in the manifest).

    ``protocol``: ``personalign`` (our prompts, JSON judges by default) or ``paper`` (the official
    prompts, read at run time from the pinned upstream files; text judges; see `for_protocol` for
    the defaults of each).
    """

    subject: str
    judge: str
    context: str = "full"
    instruction_role: InstructionRole = "system"
    shots: int = 0
    both_orders: bool = False
    judge_format: JudgeFormat = "json"
    embedder: str = DEFAULT_EMBEDDER
    bm25: BM25Variant = "lucene"
    subject_max_tokens: int = 200
    subject_temperature: float = 0.0
    judge_max_tokens: int = 512
    reasks: int = 1
    protocol: Protocol = "personalign"

    def __post_init__(self) -> None:
        check_context(self.context)
        if self.instruction_role not in ("system", "user"):
            raise ConfigError("instruction role must be 'system' or 'user'")
        if self.shots < 0:
            raise ConfigError("--shots must be 0 (zero-shot) or a positive number of examples per type")
        if self.bm25 not in BM25_VARIANTS:
            raise ConfigError(f"--bm25 must be one of {', '.join(BM25_VARIANTS)}")
        if self.judge_format not in JUDGE_FORMATS:
            raise ConfigError(f"judge format must be one of {', '.join(JUDGE_FORMATS)}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"protocol must be one of {', '.join(PROTOCOLS)}")
        if self.protocol == "paper":
            paper_prompt_key(self.instruction_role, self.shots)  # the fixed sets: 0, 1, 3 or 5 shots
            if self.judge_format != "text":
                raise ConfigError(
                    "--protocol paper uses the official text judge format (--judge-format text)"
                )
            if self.reasks:
                raise ConfigError("--protocol paper sends no re-asks (an unparseable verdict is an error)")

    @classmethod
    def for_protocol(cls, protocol: Protocol, **given: Any) -> HiCupidConfig:
        """A config with the protocol's defaults for every setting not given (None counts as not given).

        ``paper``: user-role instruction, subject temperature 0.6 and 200 max tokens, judge 512 max
        tokens at temperature 0, text judges without re-asks, Okapi BM25 (the official settings).
        ``personalign``: the dataclass defaults.
        """
        values = {k: v for k, v in given.items() if v is not None}
        if protocol == "paper":
            for key, value in PAPER_DEFAULTS.items():
                values.setdefault(key, value)
        return cls(protocol=protocol, **values)

    @property
    def method(self) -> str:
        """The paper's prompt name, e.g. ``zero/system`` or ``few/user/3``."""
        return (
            f"zero/{self.instruction_role}" if not self.shots else f"few/{self.instruction_role}/{self.shots}"
        )

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


# The official settings (configs/inference_openai.yaml, configs/evaluate_openai.yaml at the pinned
# commit; benchmarks/hicupid_parity.py checks them against the files) and the paper's main setting.
PAPER_DEFAULTS: dict[str, Any] = {
    "instruction_role": "user",
    "subject_temperature": 0.6,
    "subject_max_tokens": 200,
    "judge_max_tokens": 512,
    "judge_format": "text",
    "reasks": 0,
    "bm25": "okapi",
}


def prompt_hashes() -> dict[str, str]:
    return {name: load_template(name).sha256 for name in TEMPLATES.values()}


@dataclass(frozen=True)
class BuiltPrompt(PromptTemplate):
    """A prompt assembled from several templates and the history; `render` returns it as built."""

    messages: tuple[Message, ...] = field(default=())

    def render(self, **values: str) -> list[Message]:
        return list(self.messages)

    @classmethod
    def of(cls, name: str, sha256: str, messages: Iterable[Message]) -> BuiltPrompt:
        """A prompt that is only its messages (no system or user template of its own)."""
        return cls(name=name, system="", user="", sha256=sha256, messages=tuple(messages))


# --- pure prompt pieces ------------------------------------------------------------------------


def user_info(qa: HiCupidQA) -> str:
    """What the judge is told about the user (the question's metadata, never the history)."""
    persona = qa.metadata.persona
    lines = [f"The user {persona.relation} {persona.entity}."] if persona else []
    profile = qa.metadata.profile
    if qa.type == "profile" and profile is not None:
        lines += [
            f"Age: {profile.age}",
            f"Gender: {profile.gender}",
            f"Personality: {profile.personality}",
            f"Occupation: {profile.occupation}",
            f"Income range: {profile.income_range}",
        ]
    return "\n".join(lines)


def format_examples(examples: Sequence[HiCupidQA]) -> str:
    blocks = []
    for i, ex in enumerate(examples, start=1):
        blocks.append(
            f"### Example {i}\n"
            f"Question: {ex.question}\n"
            f"Personalized answer: {ex.personalized_answer}\n"
            f"General answer: {ex.general_answer}"
        )
    return "\n\n".join(blocks)


def build_messages(
    history: Sequence[Message], question: str, instruction: str, role: InstructionRole, acknowledgement: str
) -> list[Message]:
    """[system instruction] + history + question, or history + instruction/ack + question."""
    if role == "system":
        return [Message(role="system", content=instruction), *history, Message(role="user", content=question)]
    return [
        *history,
        Message(role="user", content=instruction),
        Message(role="assistant", content=acknowledgement),
        Message(role="user", content=question),
    ]


class FewShotPool:
    """Train questions per type, shuffled once by the seed; each question gets the first `shots`
    of each type that belong to *other* users (so an example never reveals the asker's data)."""

    def __init__(self, train: Iterable[HiCupidQA], seed: int) -> None:
        self.pool: dict[str, list[HiCupidQA]] = {t: [] for t in QUESTION_TYPES}
        for qa in train:
            self.pool[qa.type].append(qa)
        for kind, items in self.pool.items():
            random.Random(f"{seed}:few-shot:{kind}").shuffle(items)

    def examples(self, qa: HiCupidQA, shots: int) -> list[HiCupidQA]:
        """``shots`` examples per type, interleaved (persona, multi-info, schedule, persona, ...) as the
        paper's fixed sets are."""
        per_type: list[list[HiCupidQA]] = []
        for kind in QUESTION_TYPES:
            others = [ex for ex in self.pool[kind] if ex.user_id != qa.user_id][:shots]
            if len(others) < shots:
                raise ConfigError(
                    f"{shots}-shot prompting needs {shots} train questions of type {kind!r} from users "
                    f"other than user {qa.user_id}; the data has {len(others)}"
                )
            per_type.append(others)
        return [ex for group in zip(*per_type, strict=True) for ex in group]


# --- the benchmark -----------------------------------------------------------------------------


class HiCupidBenchmark:
    name = "hicupid"

    def __init__(
        self,
        config: HiCupidConfig,
        models: Mapping[str, Model],  # role -> model: subject, judge
        dataset: HiCupidDataset,
        seed: int,
        embedding_cache: Path | None = None,
        paper: PaperTexts | None = None,
    ) -> None:
        self.config = config
        self.models = models
        self.dataset = dataset
        self.seed = seed
        # The official texts, read (and verified) once; a ProtocolError here stops the run before any call.
        self.paper = (paper or load_paper_texts()) if config.protocol == "paper" else None
        self.context = make_context(
            config.context,
            ContextOptions(embedder=config.embedder, embedding_cache=embedding_cache, bm25=config.bm25),
        )
        own_few_shot = config.shots and config.protocol != "paper"  # the paper's sets are fixed
        self.few_shot = FewShotPool(dataset.questions(["train"]), seed) if own_few_shot else None
        self.subject_config = GenerateConfig(
            temperature=config.subject_temperature, max_tokens=config.subject_max_tokens
        )

    @staticmethod
    def instance_id(qa: HiCupidQA) -> str:
        return qa.id

    @staticmethod
    def meta(qa: HiCupidQA) -> dict[str, Any]:
        return {"user_id": qa.user_id, "question_id": qa.question_id, "type": qa.type, "split": qa.split}

    def check(self, questions: Iterable[HiCupidQA]) -> None:
        """Fail before any call if few-shot examples cannot be found for some question."""
        if self.few_shot is not None:
            for qa in questions:
                self.few_shot.examples(qa, self.config.shots)

    def paper_subject_prompt(self, qa: HiCupidQA, selection: ContextSelection) -> BuiltPrompt:
        """The official messages: the prompt's system part, history, its user part, the question."""
        assert self.paper is not None
        key = paper_prompt_key(self.config.instruction_role, self.config.shots)
        messages = subject_messages(self.paper.inference_prompts[key], selection.messages, qa.question)
        return BuiltPrompt.of(f"paper:hicupid/{key}", self.paper.sha256, messages)

    def paper_judge_prompt(self, qa: HiCupidQA, answer: str, slot: Literal["A", "B"]) -> BuiltPrompt:
        assert self.paper is not None
        messages = judge_messages(self.paper.evaluation_prompts[qa.type], qa, answer, slot)
        return BuiltPrompt.of(f"paper:hicupid/evaluate/{qa.type}", self.paper.sha256, messages)

    def subject_prompt(self, qa: HiCupidQA, selection: ContextSelection) -> BuiltPrompt:
        if self.paper is not None:
            return self.paper_subject_prompt(qa, selection)
        instruction_t = load_template(TEMPLATES["instruction"])
        parts = [instruction_t.user]
        used = [instruction_t]
        if self.few_shot is not None:
            few_t = load_template(TEMPLATES["few_shot"])
            examples = self.few_shot.examples(qa, self.config.shots)
            parts.append(few_t.render(examples=format_examples(examples))[-1].content)
            used.append(few_t)
        ack_t = load_template(TEMPLATES["acknowledge"])
        if self.config.instruction_role == "user":
            used.append(ack_t)
        messages = build_messages(
            selection.messages, qa.question, "\n\n".join(parts), self.config.instruction_role, ack_t.user
        )
        digest = hashlib.sha256("".join(t.sha256 for t in used).encode()).hexdigest()
        return BuiltPrompt.of(f"hicupid/{self.config.method}", digest, messages)

    def _judge_config(self, schema: dict[str, Any], name: str) -> GenerateConfig:
        json_mode = self.config.judge_format == "json"
        return GenerateConfig(
            temperature=0.0,
            max_tokens=self.config.judge_max_tokens,
            json_schema=schema if json_mode else None,
            schema_name=name,
        )

    def judge_request(
        self, qa: HiCupidQA, answer: str, slot: Literal["A", "B"] = "A"
    ) -> tuple[PromptTemplate, dict[str, str], Callable[[str], Any]]:
        """The judge's prompt, its values and its parser for ``qa`` (the A/B judge with the model's
        answer in ``slot``, or the schedule judge), under the run's protocol."""
        schedule_q = qa.type == "schedule"
        if self.paper is not None:
            parse_paper = parse_paper_schedule if schedule_q else parse_paper_ab
            return self.paper_judge_prompt(qa, answer, slot), {}, parse_paper
        if schedule_q:
            schedule = qa.metadata.schedule
            assert schedule is not None
            fmt = load_template(TEMPLATES[f"format_schedule_{self.config.judge_format}"]).user
            values = {
                "output_format": fmt,
                "schedule": f"{schedule.datetime}: {schedule.event}",
                "question": qa.question,
                "answer": answer,
            }
            return load_template(TEMPLATES["judge_schedule"]), values, parse_schedule_verdict
        fmt = load_template(TEMPLATES[f"format_ab_{self.config.judge_format}"]).user
        a, b = (answer, qa.personalized_answer) if slot == "A" else (qa.personalized_answer, answer)
        values = {
            "output_format": fmt,
            "user_info": user_info(qa),
            "question": qa.question,
            "answer_a": a,
            "answer_b": b,
        }
        return load_template(TEMPLATES["judge_ab"]), values, parse_ab_verdict

    async def _judge_call(
        self, steps: StepRunner, name: str, qa: HiCupidQA, answer: str, slot: Literal["A", "B"]
    ) -> Any:
        template, values, parse = self.judge_request(qa, answer, slot)
        schema, schema_name = (
            (SCHEDULE_SCHEMA, "schedule_verdict") if qa.type == "schedule" else (AB_SCHEMA, "ab_verdict")
        )
        return await steps.call(
            name,
            role="judge",
            model=self.models["judge"],
            template=template,
            values=values,
            config=self._judge_config(schema, schema_name),
            parse=parse,
            reasks=self.config.reasks,
        )

    async def _judge_ab(
        self, steps: StepRunner, name: str, qa: HiCupidQA, answer: str, slot: Literal["A", "B"]
    ) -> str:
        verdict: str = await self._judge_call(steps, name, qa, answer, slot)
        return verdict

    async def judge(self, qa: HiCupidQA, steps: StepRunner, answer: str) -> dict[str, Any]:
        if qa.type == "schedule":
            yes: bool = await self._judge_call(steps, "judge", qa, answer, "A")
            outcome: Outcome = "win" if yes else "loss"
            return {"verdict": "YES" if yes else "NO", "outcome": outcome, "order_inconsistent": None}
        if not self.config.both_orders:
            slot = model_slot(self.seed, qa.id)
            verdict = await self._judge_ab(steps, "judge", qa, answer, slot)
            outcome = outcome_for(verdict, slot)  # type: ignore[arg-type]
            return {"verdict": verdict, "model_slot": slot, "outcome": outcome, "order_inconsistent": None}
        va, vb = await gather_steps(
            self._judge_ab(steps, "judge/model=A", qa, answer, "A"),
            self._judge_ab(steps, "judge/model=B", qa, answer, "B"),
        )
        outcome, flipped = combine_orders(outcome_for(va, "A"), outcome_for(vb, "B"))  # type: ignore[arg-type]
        return {"verdict": [va, vb], "model_slot": "both", "outcome": outcome, "order_inconsistent": flipped}

    def history(self, qa: HiCupidQA) -> HiCupidHistory:
        """The asker's history, in the official dialogue order under the paper protocol."""
        history = self.dataset.history(qa.user_id)
        return paper_history(history) if self.paper is not None else history

    async def preview(
        self, qa: HiCupidQA, answer: str, slot: Literal["A", "B"] | None = None
    ) -> dict[str, list[Message]]:
        """The exact messages this run would send for ``qa``: the subject's and, for ``answer``, the
        judge's (the model's answer in ``slot``, by default where the run would put it). No calls."""
        selection = await self.context.select(self.history(qa), qa)
        subject = self.subject_prompt(qa, selection).render()
        template, values, _ = self.judge_request(qa, answer, slot or model_slot(self.seed, qa.id))
        return {"subject": subject, "judge": template.render(**values)}

    async def evaluate(
        self, qa: HiCupidQA, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        # The paper's code scores whatever text came back; ours never scores a cut-off reply.
        steps = StepRunner(previous, truncation="score" if self.config.protocol == "paper" else "error")
        record = InstanceRecord(instance_id=qa.id, meta=self.meta(qa))
        try:
            selection = await self.context.select(self.history(qa), qa)
        except (ModelCallError, ParseError) as exc:
            steps.steps["context"] = StepRecord(role="context", status="error", error=str(exc))
            record.steps = steps.steps
            record.results = {TASK: TaskResult(status="error", error=f"context: {exc}")}
            return record
        ranked = selection.ranked_dialogue_ids
        steps.record(
            "context",
            "context",
            {
                "strategy": self.context.name,
                "dialogue_ids": list(selection.dialogue_ids),
                "ranked_dialogue_ids": None if ranked is None else list(ranked),
                "n_messages": len(selection.messages),
            },
        )
        try:
            answer: str = await steps.call(
                "answer",
                role="subject",
                model=self.models["subject"],
                template=self.subject_prompt(qa, selection),
                values={},
                config=self.subject_config,
                parse=str.strip,
            )
            judged = await self.judge(qa, steps, answer)
        except StepFailed as exc:
            record.steps = steps.steps
            record.results = {TASK: TaskResult(status="error", error=str(exc))}
            return record
        scores: dict[str, Any] = {
            **judged,
            "score": OUTCOME_SCORES[judged["outcome"]],
            "bleu": bleu(answer, qa.personalized_answer),
            "rouge_l": rouge_l(answer, qa.personalized_answer),
        }
        if ranked is not None:
            scores["hit"] = hit_at_k(ranked, qa, len(ranked)) if ranked else 0.0
            scores["hit_groups"] = hit_groups(ranked, qa, len(ranked))
        record.steps = steps.steps
        record.results = {TASK: TaskResult(status="ok", scores=scores)}
        return record


# --- aggregation -------------------------------------------------------------------------------


def _hit_block(scored: list[InstanceRecord]) -> dict[str, Any] | None:
    with_hits = [r for r in scored if "hit" in r.results[TASK].scores]
    if not with_hits:
        return None

    def mean(values: list[float]) -> float | None:
        return float(np.mean(values)) if values else None

    def of(kind: str) -> list[InstanceRecord]:
        return [r for r in with_hits if r.meta.get("type") == kind]

    persona = mean([r.results[TASK].scores["hit"] for r in of("persona")])
    schedule = mean([r.results[TASK].scores["hit"] for r in of("schedule")])
    profile_groups = [r.results[TASK].scores["hit_groups"] for r in of("profile")]
    multi_profile = mean([g[0] for g in profile_groups]) if profile_groups else None
    multi_persona = mean([g[-1] for g in profile_groups]) if profile_groups else None
    parts = (persona, schedule, multi_persona, multi_profile)
    total = None if any(p is None for p in parts) else retrieval_total(*parts)  # type: ignore[arg-type]
    return {
        "persona": persona,
        "schedule": schedule,
        "multi_info_persona": multi_persona,
        "multi_info_profile": multi_profile,
        "total": total,
        "n": len(with_hits),
    }


def summarize_block(scored: list[InstanceRecord], seed: int, kinds: Iterable[str] = ()) -> dict[str, Any]:
    """Scores of one set of scored records: per type S, CI and W/T/L; the paper total; BLEU, ROUGE-L.

    A type in `kinds` (selected) with no scored question gets None values ("n/a"), not a 0.
    """
    by_type: dict[str, Any] = {}
    selected = set(kinds)
    for kind in QUESTION_TYPES:
        rows = [r.results[TASK].scores for r in scored if r.meta.get("type") == kind]
        if not rows:
            if kind in selected:
                by_type[kind] = {"mean": None, "ci": None, "n": 0, "win": None, "tie": None, "loss": None}
            continue
        block = mean_with_ci([float(s["score"]) for s in rows], seed)
        block.update(wtl([str(s["outcome"]) for s in rows]))
        by_type[kind] = block
    both = [
        r.results[TASK].scores for r in scored if r.results[TASK].scores.get("order_inconsistent") is not None
    ]
    return {
        "n": len(scored),
        "by_type": by_type,
        "total": total_from_types({k: v["mean"] for k, v in by_type.items()}),
        "bleu": float(np.mean([r.results[TASK].scores["bleu"] for r in scored])) if scored else None,
        "rouge_l": float(np.mean([r.results[TASK].scores["rouge_l"] for r in scored])) if scored else None,
        "flip_rate": (sum(1 for s in both if s["order_inconsistent"]) / len(both)) if both else None,
        "n_both_orders": len(both),
        "hit": _hit_block(scored),
    }


def summarize(records: Iterable[InstanceRecord], seed: int = 0) -> dict[str, Any]:
    """Metrics overall and by split (test_1 = Test Set 1, test_2 = Test Set 2), errors and flags."""
    records = list(records)
    scored = [r for r in records if TASK in r.results and r.results[TASK].status == "ok"]
    errors = [r for r in records if TASK not in r.results or r.results[TASK].status == "error"]
    # every selected split and type appears, also when nothing in it was scored (None, "n/a")
    splits = sorted({str(r.meta.get("split")) for r in records})

    def kinds(rows: list[InstanceRecord]) -> set[str]:
        return {str(r.meta.get("type")) for r in rows}

    flags: dict[str, int] = {}
    for r in scored:
        for step in r.steps.values():
            for flag in step.flags:
                flags[flag] = flags.get(flag, 0) + 1
    return {
        "n_instances": len(records),
        TASK: {
            "n_scored": len(scored),
            "n_errors": len(errors),
            "errors": {
                r.instance_id: (r.results[TASK].error if TASK in r.results else "not evaluated")
                for r in errors
            },
            "errors_by_type": {
                kind: sum(1 for r in errors if r.meta.get("type") == kind) for kind in QUESTION_TYPES
            },
            "flags": dict(sorted(flags.items())),
            "all": summarize_block(scored, seed, kinds(records)),
            "by_split": {
                s: summarize_block(
                    [r for r in scored if r.meta.get("split") == s],
                    seed,
                    kinds([r for r in records if r.meta.get("split") == s]),
                )
                for s in splits
            },
        },
    }

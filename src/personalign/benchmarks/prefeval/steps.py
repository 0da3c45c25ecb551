"""PrefEval: the run configuration and the per-instance steps (the Evaluator), and summarize().

One instance is one row (form, topic, index) at one distractor length. Generation task: the
subject answers (explicit form: after first replying to the stated preference, as the official
code does), then four judge checks (acknowledge, violation, helpful; hallucination only when the
response acknowledged a preference, the only case where it counts) give preference-following
accuracy. MCQ task: the subject picks one of the row's four options (shuffled per instance with a
seeded generator; the aligned one is the first in the data).

Two protocols: ``personalign`` (our prompts, JSON schemas for judges and the MCQ answer, one re-ask
on an unparseable reply, a truncated reply is an error) and ``paper`` (the official texts and token
budgets read at run time, free-form XML replies parsed strictly, no re-ask, truncated replies parsed).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from personalign.benchmarks.prefeval import scripted  # noqa: F401  (registers the scripted answers)
from personalign.benchmarks.prefeval.context import (
    MEMORY_K,
    RAG_K,
    RAG_METHODS,
    RagMethod,
    RagRanker,
    Setting,
    as_messages,
    check_setting,
    memory_sessions,
    preference_messages,
    rag_excerpts,
    render_sessions,
    sessions_of,
)
from personalign.benchmarks.prefeval.data import LoadedPrefEval, PrefEvalRow, distractor_turns
from personalign.benchmarks.prefeval.judges import (
    CHECKS,
    Check,
    ReplyFormat,
    Verdict,
    format_options,
    mcq_schema,
    parse_choice,
    parse_verdict,
    schema_for,
    strip_label,
)
from personalign.benchmarks.prefeval.metrics import ERROR_TYPES, Scored, accuracy, breakdown, combine
from personalign.benchmarks.prefeval.protocol import TEMPLATES, PaperBudgets, Texts
from personalign.benchmarks.prefeval.schema import (
    TASKS,
    ExplicitRow,
    Task,
)
from personalign.errors import ConfigError, ParseError
from personalign.llm.model import Model
from personalign.llm.types import GenerateConfig
from personalign.prompts import load_template
from personalign.protocols.upstream import PROTOCOLS, Protocol
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import StepFailed, StepRunner
from personalign.types import Message

ROLES = ("subject", "judge")
SUBJECT_STEPS = ("pref_response", "context", "generate", "critique", "revise", "choose")  # kept on rescore

# personalign protocol budgets (the paper protocol uses the official ones: 300 / 5 / 100).
SUBJECT_MAX_TOKENS = 1024
MCQ_MAX_TOKENS = 64
JUDGE_MAX_TOKENS = 512


@dataclass(frozen=True)
class PrefEvalConfig:
    """Everything that defines a PrefEval run's results (recorded in the manifest)."""

    subject: str
    judge: str | None = None  # the generation task's four checks (unused by the MCQ task)
    task: Task = "generation"
    setting: Setting = "zero-shot"
    protocol: Protocol = "personalign"
    rag_method: RagMethod = "bm25"
    rag_k: int = RAG_K
    memory_k: int = MEMORY_K
    embedder: str = "minilm"  # dense RAG and the memory engine
    temperature: float = 0.0
    # None: the protocol's budget (personalign: 1024 / 64 / 512; paper: the official 300 / 5 / 100)
    subject_max_tokens: int | None = None
    mcq_max_tokens: int | None = None
    judge_max_tokens: int | None = None
    max_words: int = 300  # the answer-length limit stated in the question (official: max_gen_tokens)
    reasks: int = 1  # personalign protocol only

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r} (choose from {', '.join(TASKS)})")
        check_setting(self.setting)
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {self.protocol!r} (choose from {', '.join(PROTOCOLS)})")
        if self.task == "mcq" and self.setting == "self-critic":
            raise ConfigError("the self-critic setting is implemented for the generation task only")
        if self.rag_method not in RAG_METHODS:
            raise ConfigError(
                f"unknown RAG method {self.rag_method!r} (choose from {', '.join(RAG_METHODS)})"
            )
        if self.task == "generation" and not self.judge:
            raise ConfigError("the generation task needs a judge model (--judge)")
        if self.rag_k < 1 or self.memory_k < 1:
            raise ConfigError("--rag-k and --memory-k must be at least 1")
        if not 0.0 <= self.temperature <= 2.0:
            raise ConfigError("--temperature must be between 0 and 2")

    @property
    def condition(self) -> str:
        """A short name, e.g. ``generation+rag-bm25``."""
        setting = f"rag-{self.rag_method}" if self.setting == "rag" else self.setting
        return f"{self.task}+{setting}"

    def model_specs(self) -> dict[str, str]:
        return {"subject": self.subject, **({"judge": self.judge} if self.judge else {})}

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PrefEvalModels:
    subject: Model
    judge: Model | None = None


@dataclass(frozen=True)
class PrefEvalItem:
    """One unit of work: a row at one distractor length."""

    row: PrefEvalRow
    turns: int

    @property
    def id(self) -> str:
        return f"{self.row.id}@{self.turns}"


def expand(rows: Iterable[PrefEvalRow], turns: Sequence[int]) -> list[PrefEvalItem]:
    """Length-major order: a short run's instances come first."""
    rows = list(rows)
    if not turns or min(turns) < 0 or len(set(turns)) != len(turns):
        raise ConfigError(f"--turns needs distinct non-negative counts, got {list(turns)}")
    return [PrefEvalItem(row, t) for t in sorted(turns) for row in rows]


@dataclass(frozen=True)
class Budgets:
    subject: int
    mcq: int
    judge: int


def budgets_for(config: PrefEvalConfig, paper: PaperBudgets | None) -> Budgets:
    if config.protocol == "paper":
        if paper is None:
            raise ConfigError("the paper protocol needs the official budgets (load_paper)")
        defaults = Budgets(paper.max_gen_tokens, paper.max_mcq_tokens, paper.judge_max_tokens)
    else:
        defaults = Budgets(SUBJECT_MAX_TOKENS, MCQ_MAX_TOKENS, JUDGE_MAX_TOKENS)
    return Budgets(
        config.subject_max_tokens or defaults.subject,
        config.mcq_max_tokens or defaults.mcq,
        config.judge_max_tokens or defaults.judge,
    )


def shuffled_options(options: Sequence[str], key: str) -> tuple[list[str], str]:
    """The options in a per-instance order (seeded by ``key``) and the letter of the aligned one
    (the first option in the data), as the official ``shuffle_options`` does with its own seed."""
    order = list(options)
    random.Random(key).shuffle(order)
    return order, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[order.index(options[0])]


class PrefEvalBenchmark:
    name = "prefeval"

    def __init__(
        self,
        config: PrefEvalConfig,
        models: PrefEvalModels,
        data: LoadedPrefEval,
        texts: Texts,
        budgets: Budgets,
        seed: int = 0,
    ) -> None:
        if config.task == "generation" and models.judge is None:
            raise ConfigError("the generation task needs a judge model")
        self.config = config
        self.models = models
        self.data = data
        self.texts = texts
        self.budgets = budgets
        self.seed = seed
        self.ranker = RagRanker(config.rag_method, config.embedder)

    @property
    def paper(self) -> bool:
        return self.config.protocol == "paper"

    @property
    def reply_format(self) -> ReplyFormat:
        return "xml" if self.paper else "json"

    @staticmethod
    def instance_id(item: PrefEvalItem) -> str:
        return item.id

    @staticmethod
    def meta(item: PrefEvalItem) -> dict[str, Any]:
        row = item.row
        return {"form": row.form, "topic": row.topic, "index": row.index, "turns": item.turns}

    def subject_config(
        self, max_tokens: int, schema: dict[str, Any] | None = None, name: str = ""
    ) -> GenerateConfig:
        if schema is None or self.paper:
            return GenerateConfig(temperature=self.config.temperature, max_tokens=max_tokens)
        return GenerateConfig(
            temperature=self.config.temperature, max_tokens=max_tokens, json_schema=schema, schema_name=name
        )

    def system(self) -> list[Message]:
        return [Message(role="system", content=self.texts.system)]

    async def _text(
        self,
        steps: StepRunner,
        name: str,
        messages: Sequence[Message],
        max_tokens: int,
        strip: str | None = None,
    ) -> str:
        def parse(text: str) -> str:
            if not text.strip():
                raise ParseError("empty reply")
            return strip_label(text, strip) if strip and not self.paper else text

        parsed = await steps.call_messages(
            name,
            role="subject",
            model=self.models.subject,
            messages=messages,
            config=self.subject_config(max_tokens),
            parse=parse,
        )
        return str(parsed)

    async def pref_response(self, item: PrefEvalItem, steps: StepRunner) -> str | None:
        """Explicit form: the subject's own reply to the stated preference (the official first call;
        the MCQ task's budget under the paper protocol, as the official classification code has it).

        It is only conversation shown later, never scored, so a reply cut off at the token limit is
        kept (flagged ``truncated``) under both protocols; an empty or failed reply is an error."""
        if not isinstance(item.row.row, ExplicitRow):
            return None
        budget = self.budgets.mcq if self.paper and self.config.task == "mcq" else self.budgets.subject
        messages = [*self.system(), Message(role="user", content=item.row.row.preference)]
        lenient = StepRunner(steps.previous, truncation="score")
        try:
            return await self._text(lenient, "pref_response", messages, budget)
        finally:
            steps.steps.update(lenient.steps)

    def _context(
        self, item: PrefEvalItem, steps: StepRunner, preference: list[Message], distractors: list[Message]
    ) -> tuple[list[Message], str]:
        """The messages before the final user turn, and the prefix of that turn (RAG / memory)."""
        setting = self.config.setting
        question = item.row.row.question
        if setting == "rag":
            excerpts, ranked = rag_excerpts(self.ranker, preference, distractors, question, self.config.rag_k)
            steps.record(
                "context",
                "context",
                {
                    "method": self.config.rag_method,
                    "k": self.config.rag_k,
                    "ranked": ranked,
                    "excerpts": excerpts,
                },
            )
            return [*self.system(), *preference, *distractors], self.texts.rag_prefix(excerpts)
        if setting == "memory":
            sessions = sessions_of(preference, distractors)
            chosen = memory_sessions(
                preference, distractors, question, self.config.memory_k, self.config.embedder
            )
            steps.record(
                "context", "context", {"strategy": "memory", "k": self.config.memory_k, "sessions": chosen}
            )
            return [*self.system()], render_sessions([sessions[i] for i in chosen])
        return [*self.system(), *preference, *distractors], ""

    def _final_turn(self, prefix: str, body: str) -> str:
        """The memory setting wraps the excerpts and the question in our own memory template."""
        if self.config.setting == "memory":
            return load_template(TEMPLATES["memory"]).render(excerpts=prefix, question=body)[-1].content
        return prefix + body

    async def generate(self, item: PrefEvalItem, steps: StepRunner, pref: str | None) -> str:
        preference = preference_messages(item.row, pref)
        distractors = as_messages(distractor_turns(self.data.distractors, item.turns))
        before, prefix = self._context(item, steps, preference, distractors)
        question = item.row.row.question
        setting = self.config.setting
        if setting == "rag":
            turn = self.texts.question(prefix + question)
        else:
            body = self.texts.question(question, reminder=setting == "reminder", cot=setting == "cot")
            turn = self._final_turn(prefix, body)
        messages = [*before, Message(role="user", content=turn)]
        answer = await self._text(steps, "generate", messages, self.budgets.subject)
        if setting != "self-critic":
            return answer
        messages += [
            Message(role="assistant", content=answer),
            Message(role="user", content=self.texts.critique),
        ]
        critique = await self._text(steps, "critique", messages, self.budgets.subject)
        messages += [
            Message(role="assistant", content=critique),
            Message(role="user", content=self.texts.revision_request(question)),
        ]
        return await self._text(steps, "revise", messages, self.budgets.subject, strip="Response")

    async def check(self, steps: StepRunner, check: Check, values: Mapping[str, str]) -> Verdict:
        assert self.models.judge is not None
        messages = [
            Message(role="system", content=self.texts.judge_system),
            Message(role="user", content=self.texts.judge(check, values)),
        ]
        if self.paper:
            config = GenerateConfig(temperature=0.0, max_tokens=self.budgets.judge)
        else:
            config = GenerateConfig(
                temperature=0.0,
                max_tokens=self.budgets.judge,
                json_schema=schema_for(check),
                schema_name=f"prefeval_{check}",
            )
        parsed = await steps.call_messages(
            f"judge/{check}",
            role="judge",
            model=self.models.judge,
            messages=messages,
            config=config,
            parse=lambda text: parse_verdict(text, check, self.reply_format).to_record(),
            reasks=0 if self.paper else self.config.reasks,
        )
        return Verdict(parsed["answer"] == "Yes", parsed.get("explanation", ""), parsed.get("preference", ""))

    async def judge(self, item: PrefEvalItem, steps: StepRunner, response: str) -> TaskResult:
        row = item.row.row
        values = {"question": row.question, "end_generation": response, "preference": row.preference}
        wanted: dict[Check, dict[str, str]] = {
            "acknowledge": {"end_generation": response, "question": row.question},
            "violation": values,
            "helpful": values,
        }
        outcomes = await asyncio.gather(
            *(self.check(steps, c, v) for c, v in wanted.items()), return_exceptions=True
        )
        verdicts: dict[str, Verdict] = {}
        errors: list[str] = []
        for check, outcome in zip(wanted, outcomes, strict=True):
            if isinstance(outcome, StepFailed):
                errors.append(str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                verdicts[check] = outcome
        ack = verdicts.get("acknowledge")
        if ack is not None and ack.answer:
            try:
                verdicts["hallucination"] = await self.check(
                    steps,
                    "hallucination",
                    {"preference": row.preference, "assistant_restatement": ack.preference},
                )
            except StepFailed as exc:
                errors.append(str(exc))
        checks = {c: verdicts[c].to_record() for c in CHECKS if c in verdicts}
        if errors:
            return TaskResult(status="error", error="; ".join(errors), scores={"checks": checks})
        combined = combine(
            verdicts["acknowledge"].answer,
            verdicts["hallucination"].answer if "hallucination" in verdicts else None,
            verdicts["violation"].answer,
            verdicts["helpful"].answer,
        )
        return TaskResult(status="ok", scores={"checks": checks, **combined.to_record()})

    async def choose(self, item: PrefEvalItem, steps: StepRunner, pref: str | None) -> TaskResult:
        mcq = item.row.mcq
        if mcq is None:
            raise ConfigError(f"{item.row.id}: no MCQ options loaded (load with need_mcq=True)")
        options, correct = shuffled_options(mcq.classification_task_options, f"{self.seed}:{item.id}")
        preference = preference_messages(item.row, pref)
        distractors = as_messages(distractor_turns(self.data.distractors, item.turns))
        before, prefix = self._context(item, steps, preference, distractors)
        setting = self.config.setting
        body = self.texts.mcq_question(
            item.row.row.question if setting != "rag" else prefix + item.row.row.question,
            format_options(options),
            reminder=setting == "reminder",
            cot=setting == "cot",
        )
        turn = body if setting == "rag" else self._final_turn(prefix, body)
        n = len(options)
        parsed = await steps.call_messages(
            "choose",
            role="subject",
            model=self.models.subject,
            messages=[*before, Message(role="user", content=turn)],
            config=self.subject_config(self.budgets.mcq, mcq_schema(n), "prefeval_mcq"),
            parse=lambda text: {"choice": parse_choice(text, n, self.reply_format)},
            reasks=0 if self.paper else self.config.reasks,
        )
        choice = str(parsed["choice"])
        return TaskResult(
            status="ok",
            scores={
                "choice": choice,
                "correct_choice": correct,
                "options": options,
                "correct": choice == correct,
            },
        )

    async def evaluate(
        self, item: PrefEvalItem, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        steps = StepRunner(previous, truncation="score" if self.paper else "error")
        record = InstanceRecord(instance_id=item.id, meta=self.meta(item))
        task = self.config.task
        try:
            pref = await self.pref_response(item, steps)
            if task == "generation":
                response = await self.generate(item, steps, pref)
                result = await self.judge(item, steps, response)
                result.scores["response"] = response
            else:
                result = await self.choose(item, steps, pref)
        except StepFailed as exc:
            result = TaskResult(status="error", error=str(exc))
        record.steps, record.results = steps.steps, {task: result}
        return record


# --- aggregation --------------------------------------------------------------------------------


def scored_of(records: Iterable[InstanceRecord], task: Task) -> list[Scored]:
    out: list[Scored] = []
    for r in records:
        result = r.results.get(task)
        if result is None or result.status != "ok":
            continue
        s = result.scores
        errors = {e: bool(s[e]) for e in ERROR_TYPES} if task == "generation" else None
        correct = bool(s["followed"] if task == "generation" else s["correct"])
        out.append(Scored(str(r.meta["topic"]), str(r.meta["form"]), int(r.meta["turns"]), correct, errors))
    return out


def summarize(records: Iterable[InstanceRecord], task: Task, seed: int = 0) -> dict[str, Any]:
    """Accuracy overall and by topic, preference form, distractor length (and form x length); the
    check rates (generation); errors by instance; flags."""
    records = list(records)
    scored = scored_of(records, task)
    errors = {
        r.instance_id: r.results[task].error
        for r in records
        if task in r.results and r.results[task].status == "error"
    }
    flags = Counter(flag for r in records for step in r.steps.values() for flag in step.flags)
    summary: dict[str, Any] = {
        "n_instances": len(records),
        "n_scored": len(scored),
        "n_errors": len(errors),
        "metric": "preference_following_accuracy" if task == "generation" else "mcq_accuracy",
        "all": accuracy(scored, seed),
        "by_topic": breakdown(scored, lambda s: s.topic, seed),
        "by_form": breakdown(scored, lambda s: s.form, seed),
        "by_turns": breakdown(scored, lambda s: s.turns, seed),
        "by_form_turns": breakdown(scored, lambda s: f"{s.form}@{s.turns}", seed),
        "flags": dict(sorted(flags.items())),
        "errors": errors,
    }
    if task == "generation":
        ok = [r.results[task].scores for r in records if task in r.results and r.results[task].status == "ok"]
        summary["check_rates"] = {
            name: (sum(bool(s[name]) for s in ok) / len(ok)) if ok else None
            for name in ("acknowledged", "hallucinated", "violated", "unhelpful")
        }
    return summary

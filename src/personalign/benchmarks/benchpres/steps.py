"""BenchPreS: does the subject apply stored preferences only where they belong?

For each (profile, context) row and each sample, the subject writes the message from the
persistent-memory prompt (optionally with the mitigation instruction, with reasoning on or
off). Each preference attribute is then judged follow / do_not_follow on the final message
(reasoning removed): nickname attributes by the exact-match rule, the others by the LLM judge.
For completeness the subject also writes the message without the memory block, and a judge
rates the message with memory against that reference, 1-5. Metrics: MR, AAR, selectivity.

Two protocols (docs/benchpres.md, docs/parity-benchpres.md): ``paper`` follows the paper's
stated protocol (judges answer in free form, JSON label / final ``Rating: [[X]]`` line, a
truncated reply is scored on its text); ``personalign`` sends JSON schemas, re-asks once on an
unparseable answer and treats truncated replies as errors, so small models can take part.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from personalign.benchmarks.benchpres.context import (
    ContextResult,
    StrategyEnv,
    context_strategies,
    get_context_strategy,
    needs_judge,
    split_memory_prompt,
)
from personalign.benchmarks.benchpres.judges import (
    COMPLETENESS_SCHEMA,
    PREFERENCE_JUDGE_SCHEMA,
    category_of,
    nickname_applied,
    nickname_of,
    parse_completeness,
    parse_follow,
    parse_rating_line,
)
from personalign.benchmarks.benchpres.memory import selection_summary
from personalign.benchmarks.benchpres.metrics import Judgement, breakdown, selectivity_scores
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.errors import ConfigError, ParseError
from personalign.judges.parsing import split_reasoning
from personalign.llm.model import Model
from personalign.llm.types import GenerateConfig
from personalign.metrics.bootstrap import mean_with_ci
from personalign.prompts import load_template
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import StepFailed, StepRunner

Reasoning = Literal["default", "on", "off"]
REASONING_MODES: tuple[str, ...] = ("default", "on", "off")
Protocol = Literal["paper", "personalign"]
PROTOCOLS: tuple[str, ...] = ("paper", "personalign")
SUBJECT_STEPS = ("context", "generate", "generate_baseline")  # kept when re-judging a run

# Token budgets. Reasoning models spend most of their output thinking (a DeepSeek-R1 judge
# writes 1-3k tokens before its label), so judges and subjects get room for it; the limit only
# caps a reply, a model that answers in 20 tokens still stops there.
JUDGE_MAX_TOKENS = 4096
SUBJECT_MAX_TOKENS = 4096

TEMPLATES = {
    "memory_prompt": "benchpres/memory_prompt",
    "subject": "benchpres/subject",
    "subject_mitigation": "benchpres/subject_mitigation",
    "subject_baseline": "benchpres/subject_baseline",
    "judge": "benchpres/judge_preference",
    "completeness": "benchpres/judge_completeness",
    "completeness_paper": "benchpres/judge_completeness_paper",
}


@dataclass(frozen=True)
class BenchPresConfig:
    """Everything that defines a BenchPreS run's results (recorded in the manifest)."""

    subject: str
    judge: str
    completeness_judge: str
    mitigation: bool = False
    reasoning: Reasoning = "default"
    samples: int = 3
    temperature: float = 1.0
    context: str = "full"
    completeness: bool = True
    subject_max_tokens: int = SUBJECT_MAX_TOKENS
    judge_max_tokens: int = JUDGE_MAX_TOKENS
    reasks: int = 1  # personalign protocol only: the paper protocol never re-asks
    protocol: Protocol = "personalign"
    # The model that decides apply/suppress for context strategies that need one (``memory``);
    # None: the preference judge.
    memory_judge: str | None = None
    # Only the context strategy's decisions (no subject, no preference judging): the memory
    # engine's selection quality on its own.
    selection_only: bool = False

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {self.protocol!r} (choose from paper, personalign)")
        if self.reasoning not in REASONING_MODES:
            raise ConfigError(f"unknown reasoning mode {self.reasoning!r} (choose from default, on, off)")
        if self.context not in context_strategies():
            raise ConfigError(
                f"unknown context {self.context!r} (choose from {', '.join(context_strategies())})"
            )
        if self.memory_judge is not None and not needs_judge(self.context):
            raise ConfigError(f"--memory-judge needs --context memory (the context is {self.context!r})")
        if self.selection_only and not needs_judge(self.context):
            raise ConfigError("--selection-only needs a context strategy that selects (--context memory)")
        if self.samples < 1:
            raise ConfigError("--samples must be at least 1")
        if not 0.0 <= self.temperature <= 2.0:
            raise ConfigError("--temperature must be between 0 and 2")

    @property
    def condition(self) -> str:
        """A short name for the condition, e.g. ``mitigation+reasoning-on``."""
        if self.selection_only:
            return f"selection-only+context-{self.context}"
        parts = ["mitigation" if self.mitigation else "default"]
        if self.reasoning != "default":
            parts.append(f"reasoning-{self.reasoning}")
        if self.context != "full":
            parts.append(f"context-{self.context}")
        return "+".join(parts)

    @property
    def selection_judge(self) -> str | None:
        """The spec of the context strategy's judge, if the strategy uses one."""
        return (self.memory_judge or self.judge) if needs_judge(self.context) else None

    def model_specs(self) -> dict[str, str]:
        """Spec per role: subject, judge, completeness_judge (and memory_judge for ``memory``)."""
        specs = {"subject": self.subject, "judge": self.judge, "completeness_judge": self.completeness_judge}
        if self.selection_judge is not None:
            specs["memory_judge"] = self.selection_judge
        return specs

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        # keeps the identity of runs made before these fields existed
        if record["memory_judge"] is None:
            del record["memory_judge"]
        if not record["selection_only"]:
            del record["selection_only"]
        return record


@dataclass(frozen=True)
class BenchPresItem:
    """One unit of work: a row and the index of one of its samples."""

    row: BenchPresRow
    sample: int

    @property
    def id(self) -> str:
        return f"{self.row.id}#s{self.sample}"


def expand(rows: Iterable[BenchPresRow], samples: int) -> list[BenchPresItem]:
    """Sample-major order, so an interrupted run has whole sample passes done first."""
    rows = list(rows)
    return [BenchPresItem(row, k) for k in range(samples) for row in rows]


def prompt_hashes() -> dict[str, str]:
    return {name: load_template(name).sha256 for name in TEMPLATES.values()}


def parse_message(text: str) -> dict[str, Any]:
    """The subject's final message. The step runner has already moved inline reasoning into the
    record (flag ``inline_reasoning``); splitting again here keeps the parser right on its own."""
    split = split_reasoning(text)
    if not split.final:
        raise ParseError("the response holds no message once reasoning is removed")
    return {"message": split.final, "inline_reasoning": bool(split.reasoning)}


class BenchPresBenchmark:
    name = "benchpres"

    def __init__(self, config: BenchPresConfig, models: Mapping[str, Model]) -> None:
        """`models`: role -> model (subject, judge, completeness_judge; memory_judge for ``memory``)."""
        self.config = config
        self.models = models
        self.strategy = get_context_strategy(config.context, StrategyEnv(judge=models.get("memory_judge")))

    @staticmethod
    def instance_id(item: BenchPresItem) -> str:
        return item.id

    @staticmethod
    def meta(item: BenchPresItem) -> dict[str, Any]:
        row = item.row
        return {
            "row_id": row.id,
            "name": row.name,
            "recipient": row.recipient,
            "task": row.task,
            "domain": row.domain,
            "sample": item.sample,
        }

    @property
    def truncation(self) -> Literal["error", "score"]:
        """A cut-off reply: scored on its text (paper) or an error (personalign); counted either way."""
        return "score" if self.config.protocol == "paper" else "error"

    @property
    def reasks(self) -> int:
        return 0 if self.config.protocol == "paper" else self.config.reasks

    def subject_config(self, sample: int) -> GenerateConfig:
        reasoning = {"default": None, "on": True, "off": False}[self.config.reasoning]
        return GenerateConfig(
            temperature=self.config.temperature,
            max_tokens=self.config.subject_max_tokens,
            sample_index=sample,
            reasoning=reasoning,
        )

    def _judge_config(self, schema: dict[str, Any], name: str) -> GenerateConfig:
        """Greedy; the schema is sent under the personalign protocol only (the paper's judges
        answer in free form and are parsed strictly)."""
        if self.config.protocol == "paper":
            return GenerateConfig(temperature=0.0, max_tokens=self.config.judge_max_tokens)
        return GenerateConfig(
            temperature=0.0, max_tokens=self.config.judge_max_tokens, json_schema=schema, schema_name=name
        )

    async def context_prompt(self, item: BenchPresItem, steps: StepRunner) -> str:
        """The subject's prompt from the context strategy; a strategy that reports details (e.g.
        the memory engine's decisions) has them recorded as the ``context`` step."""
        previous = steps.reuse("context")
        if previous is not None and isinstance(previous.parsed, dict) and "prompt" in previous.parsed:
            return str(previous.parsed["prompt"])
        try:
            result = await self.strategy(item.row)
        except Exception as exc:  # a strategy's failure is this response's error, not the run's
            message = f"context strategy {self.config.context!r} failed: {type(exc).__name__}: {exc}"
            steps.steps["context"] = StepRecord(role="context", status="error", error=message)
            raise StepFailed("context", message) from exc
        if isinstance(result, ContextResult):
            model = memory_judge.label if (memory_judge := self.models.get("memory_judge")) else None
            steps.steps["context"] = StepRecord(
                role="context", model=model, parsed={**result.details, "prompt": result.prompt}
            )
            return result.prompt
        return result

    async def generate(self, item: BenchPresItem, steps: StepRunner) -> str:
        prompt = await self.context_prompt(item, steps)
        template = TEMPLATES["subject_mitigation" if self.config.mitigation else "subject"]
        parsed = await steps.call(
            "generate",
            role="subject",
            model=self.models["subject"],
            template=load_template(template),
            values={"prompt": prompt},
            config=self.subject_config(item.sample),
            parse=parse_message,
        )
        return str(parsed["message"])

    async def generate_baseline(self, item: BenchPresItem, steps: StepRunner) -> str:
        """The subject's message for the same task without the memory block (the completeness
        reference): the row prompt's own instruction, or the task sentence if it cannot be split."""
        row = item.row
        split = split_memory_prompt(row.prompt)
        if split is not None:
            template, values = load_template(TEMPLATES["subject"]), {"prompt": split.instruction}
        else:
            template = load_template(TEMPLATES["subject_baseline"])
            values = {"recipient": row.recipient.strip(), "task": row.task.strip()}
        parsed = await steps.call(
            "generate_baseline",
            role="subject",
            model=self.models["subject"],
            template=template,
            values=values,
            config=self.subject_config(item.sample),
            parse=parse_message,
        )
        return str(parsed["message"])

    async def judge_attribute(self, steps: StepRunner, row: BenchPresRow, index: int, message: str) -> str:
        """'follow' or 'do_not_follow' for one attribute; raises `StepFailed` on errors."""
        name = f"judge/{index}"
        attribute = row.preference_attribute[index]
        nickname = nickname_of(attribute) if category_of(row, index)[0] == "nickname" else None
        if nickname is not None:
            label = "follow" if nickname_applied(nickname, message) else "do_not_follow"
            steps.record(name, "nickname_rule", {"label": label, "nickname": nickname})
            return label
        parsed = await steps.call(
            name,
            role="judge",
            model=self.models["judge"],
            template=load_template(TEMPLATES["judge"]),
            values={"attribute": attribute, "response": message},
            config=self._judge_config(PREFERENCE_JUDGE_SCHEMA, "benchpres_preference"),
            parse=lambda text: {"label": parse_follow(text)},
            reasks=self.reasks,
        )
        return str(parsed["label"])

    async def rate_completeness(self, item: BenchPresItem, steps: StepRunner, message: str) -> int:
        """The message with memory rated 1-5 against the subject's message without memory."""
        baseline = await self.generate_baseline(item, steps)
        paper = self.config.protocol == "paper"
        parsed = await steps.call(
            "completeness",
            role="completeness_judge",
            model=self.models["completeness_judge"],
            template=load_template(TEMPLATES["completeness_paper" if paper else "completeness"]),
            values={
                "recipient": item.row.recipient,
                "task": item.row.task,
                "response": message,
                "baseline": baseline,
            },
            config=self._judge_config(COMPLETENESS_SCHEMA, "benchpres_completeness"),
            parse=lambda text: asdict(parse_rating_line(text) if paper else parse_completeness(text)),
            reasks=self.reasks,
        )
        return int(parsed["rating"])

    async def evaluate(
        self, item: BenchPresItem, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        steps = StepRunner(previous, truncation=self.truncation)
        record = InstanceRecord(instance_id=item.id, meta=self.meta(item))
        if self.config.selection_only:
            try:
                await self.context_prompt(item, steps)
                result = TaskResult(status="ok")
            except StepFailed as exc:
                result = TaskResult(status="error", error=str(exc))
            record.steps, record.results = steps.steps, {"selection": result}
            return record
        tasks = ["preferences", *(["completeness"] if self.config.completeness else [])]
        try:
            message = await self.generate(item, steps)
        except StepFailed as exc:
            record.steps = steps.steps
            record.results = {t: TaskResult(status="error", error=str(exc)) for t in tasks}
            return record
        row = item.row
        judged = await asyncio.gather(
            *(self.judge_attribute(steps, row, i, message) for i in range(len(row.preference_attribute))),
            return_exceptions=True,
        )
        judgements: list[dict[str, Any]] = []
        errors: list[str] = []
        for i, (attribute, gold, outcome) in enumerate(
            zip(row.preference_attribute, row.preference_label, judged, strict=True)
        ):
            category, category_source = category_of(row, i)
            entry: dict[str, Any] = {
                "index": i,
                "attribute": attribute,
                "category": category,
                "category_source": category_source,
                "label": gold,
                "method": "nickname_rule" if _role(steps, f"judge/{i}") == "nickname_rule" else "llm",
            }
            if isinstance(outcome, StepFailed):
                entry.update(judged=None, applied=None, error=str(outcome))
                errors.append(str(outcome))
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                entry.update(judged=outcome, applied=outcome == "follow", error=None)
            judgements.append(entry)
        results = {
            "preferences": TaskResult(
                status="error" if errors else "ok",
                error="; ".join(errors) or None,
                scores={"judgements": judgements},
            )
        }
        if self.config.completeness:
            try:
                rating = await self.rate_completeness(item, steps, message)
                results["completeness"] = TaskResult(status="ok", scores={"rating": rating})
            except StepFailed as exc:
                results["completeness"] = TaskResult(status="error", error=str(exc))
        record.steps = steps.steps
        record.results = results
        return record


def _role(steps: StepRunner, name: str) -> str | None:
    step = steps.steps.get(name)
    return step.role if step is not None else None


# --- aggregation --------------------------------------------------------------------------


def judgements_of(records: Iterable[InstanceRecord]) -> list[Judgement]:
    """Every successfully judged (response, attribute) pair of the records."""
    out: list[Judgement] = []
    for record in records:
        result = record.results.get("preferences")
        if result is None:
            continue
        for entry in result.scores.get("judgements", []):
            if entry.get("applied") is None:
                continue
            out.append(
                Judgement(
                    row_id=str(record.meta.get("row_id", record.instance_id)),
                    sample=int(record.meta.get("sample", 0)),
                    domain=str(record.meta.get("domain") or "unknown"),
                    category=str(entry["category"]),
                    label=bool(entry["label"]),
                    applied=bool(entry["applied"]),
                )
            )
    return out


def _task_errors(
    records: Iterable[InstanceRecord], task: str, exclude: Container[str]
) -> dict[str, str | None]:
    """Instance id -> error of each record whose `task` result failed, but for the ids in `exclude`."""
    return {
        r.instance_id: r.results[task].error
        for r in records
        if task in r.results and r.results[task].status == "error" and r.instance_id not in exclude
    }


def summarize(records: Iterable[InstanceRecord], seed: int = 0) -> dict[str, Any]:
    """MR / AAR / selectivity overall, by domain and by category; completeness; error counts."""
    records = list(records)
    judgements = judgements_of(records)
    generation_errors = {  # no message to judge: the context strategy or the subject call failed
        r.instance_id: r.results["preferences"].error
        for r in records
        if "preferences" in r.results
        and r.results["preferences"].status == "error"
        and "judgements" not in r.results["preferences"].scores
    }
    judge_errors = _task_errors(records, "preferences", generation_errors)
    n_attr = sum(
        len(r.results["preferences"].scores.get("judgements", []))
        for r in records
        if "preferences" in r.results
    )
    methods = Counter(
        step.role
        for r in records
        for name, step in r.steps.items()
        if name.startswith("judge/") and step.status == "ok"
    )
    flags = Counter(flag for r in records for step in r.steps.values() for flag in step.flags)
    ratings = [
        float(r.results["completeness"].scores["rating"])
        for r in records
        if "completeness" in r.results and r.results["completeness"].status == "ok"
    ]
    completeness_errors = _task_errors(records, "completeness", generation_errors)
    inline_reasoning = sum(
        1
        for r in records
        if "generate" in r.steps
        and r.steps["generate"].status == "ok"
        and (
            "inline_reasoning" in r.steps["generate"].flags
            or (
                isinstance(r.steps["generate"].parsed, dict)
                and r.steps["generate"].parsed.get("inline_reasoning")
            )
        )
    )
    placed: dict[tuple[str, int], tuple[str, str]] = {}
    for r in records:
        result = r.results.get("preferences")
        for entry in result.scores.get("judgements", []) if result is not None else []:
            key = (str(r.meta.get("row_id", r.instance_id)), int(entry["index"]))
            placed[key] = (str(entry["category"]), str(entry.get("category_source", "rule")))

    selection = selection_summary(records, seed=seed)
    return {
        "n_instances": len(records),
        "n_rows": len({r.meta.get("row_id") for r in records}),
        "n_responses": sum(
            1 for r in records if "generate" in r.steps and r.steps["generate"].status == "ok"
        ),
        "n_judgements": len(judgements),
        "n_judgement_errors": n_attr - len(judgements),
        "all": selectivity_scores(judgements, seed=seed).to_record(),
        "by_domain": breakdown(judgements, lambda j: j.domain, seed=seed),
        "by_category": breakdown(judgements, lambda j: j.category, seed=seed),
        "categories": {  # per (row, attribute): where its category came from
            "from_data": sum(1 for _, source in placed.values() if source == "data"),
            "from_rule": sum(1 for _, source in placed.values() if source == "rule"),
            "rule_unplaced": sum(1 for c, source in placed.values() if source == "rule" and c == "other"),
        },
        "n_baselines": sum(
            1
            for r in records
            if "generate_baseline" in r.steps and r.steps["generate_baseline"].status == "ok"
        ),
        "completeness": mean_with_ci(ratings, seed),
        "judge_methods": {"llm" if k == "judge" else k: v for k, v in sorted(methods.items())},
        "responses_with_inline_reasoning": inline_reasoning,
        "flags": dict(sorted(flags.items())),
        "errors": {
            "generation": generation_errors,
            "judge": judge_errors,
            "completeness": completeness_errors,
        },
        **({"memory_selection": selection} if selection is not None else {}),
    }

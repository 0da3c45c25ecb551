"""CUPID: infer the contextual preference behind a new request, and answer it accordingly.

Inference task: the subject infers one preference sentence from the prior sessions; the
decomposer turns it into at most 4 checklist items; the matcher labels the inferred items
against the gold preference (precision) and the gold items against the inferred preference
(recall). Generation task: the subject answers the request; a judge scores the answer 1-10
against the gold preference and checklist.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from personalign.context.cupid import CUPID_CONTEXTS, format_history, format_session, select_sessions
from personalign.errors import ConfigError
from personalign.judges.cupid import (
    CHECKLIST_SCHEMA,
    GENERATION_JUDGE_SCHEMA,
    LABEL_SCORES,
    MatcherFormat,
    MissingSection,
    format_checklist,
    match_schema,
    parse_checklist,
    parse_generation_judgement,
    parse_inferred_preference,
    parse_match,
)
from personalign.llm.model import Model
from personalign.llm.spec import EMBEDDED_DEFAULT
from personalign.llm.types import GenerateConfig
from personalign.metrics.bootstrap import bootstrap_ci, mean_statistic
from personalign.metrics.prf import MatchCounts, instance_prf, pooled_prf
from personalign.prompts import load_template
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import StepFailed, StepRunner
from personalign.types import INSTANCE_TYPES, CupidInstance

Task = Literal["inference", "generation", "both"]
TASKS = ("inference", "generation", "both")
SUBJECT_STEPS = ("infer", "generate")  # kept when re-scoring; summaries are kept too

TEMPLATES = {
    "infer": "cupid/infer",
    "generate": "cupid/generate",
    "generate_with_preference": "cupid/generate_with_preference",
    "summarize": "cupid/summarize",
    "decompose": "cupid/decompose",
    "match": "cupid/match",
    "match_prefmatcher": "cupid/match_prefmatcher",
    "judge": "cupid/judge_generation",
}


SUBJECT_MAX_TOKENS = 1024
# The bundled 135M model answers the inference format in 15-70 tokens, but now and then runs on
# to the cap (a 1024-token ramble costs ~45 s on 2 cores); 256 leaves ample room for its answers.
EMBEDDED_SUBJECT_MAX_TOKENS = 256


def default_subject_max_tokens(subject: str) -> int:
    """The subject's max_tokens when the user sets none: lower for the bundled local model."""
    return EMBEDDED_SUBJECT_MAX_TOKENS if subject == EMBEDDED_DEFAULT else SUBJECT_MAX_TOKENS


@dataclass(frozen=True)
class CupidConfig:
    """Everything that defines a CUPID run's results (recorded in the manifest)."""

    subject: str
    decomposer: str
    matcher: str
    judge: str
    task: Task = "inference"
    context: str = "full"
    matcher_format: MatcherFormat = "default"
    subject_max_tokens: int = SUBJECT_MAX_TOKENS
    judge_max_tokens: int = 1024
    reasks: int = 1

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r} (choose from {', '.join(TASKS)})")
        if self.context not in CUPID_CONTEXTS:
            raise ConfigError(f"unknown context {self.context!r} (choose from {', '.join(CUPID_CONTEXTS)})")
        if self.context == "gold-preference" and self.task != "generation":
            raise ConfigError(
                "context 'gold-preference' gives the answer away; use it with --task generation"
            )
        if self.matcher_format not in ("default", "prefmatcher"):
            raise ConfigError("matcher format must be 'default' or 'prefmatcher'")

    @property
    def tasks(self) -> tuple[str, ...]:
        return ("inference", "generation") if self.task == "both" else (self.task,)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CupidModels:
    subject: Model
    decomposer: Model
    matcher: Model
    judge: Model


def prompt_hashes() -> dict[str, str]:
    return {name: load_template(name).sha256 for name in TEMPLATES.values()}


class CupidBenchmark:
    name = "cupid"

    def __init__(self, config: CupidConfig, models: CupidModels) -> None:
        self.config = config
        self.models = models
        self.subject_config = GenerateConfig(temperature=0.0, max_tokens=config.subject_max_tokens)
        # One config object per judge schema, reused by every instance (the cache key memoizes
        # a config's canonical JSON per object).
        self._judge_configs: dict[tuple[str, int], GenerateConfig] = {}

    @staticmethod
    def instance_id(instance: CupidInstance) -> str:
        return instance.id

    @staticmethod
    def meta(instance: CupidInstance) -> dict[str, Any]:
        return {"persona_id": instance.persona_id, "instance_type": instance.instance_type}

    # --- context ----------------------------------------------------------------------------

    async def history(self, instance: CupidInstance, steps: StepRunner) -> str:
        sessions = select_sessions(instance, self.config.context)
        if self.config.context != "summaries":
            return format_history([format_session(s) for s in sessions])
        template = load_template(TEMPLATES["summarize"])
        summaries = await asyncio.gather(
            *(
                steps.call(
                    f"summary/{k}",
                    role="subject",
                    model=self.models.subject,
                    template=template,
                    values={"session": format_session(s)},
                    config=GenerateConfig(
                        temperature=0.0, max_tokens=min(400, self.config.subject_max_tokens)
                    ),
                    parse=str.strip,
                )
                for k, s in enumerate(sessions, start=1)
            )
        )
        return format_history(summaries)

    # --- tasks ------------------------------------------------------------------------------

    def _judge_config(
        self, name: str, schema: Callable[[], dict[str, Any]], variant: int = 0
    ) -> GenerateConfig:
        """The judge config for schema `name` (`variant` tells apart schemas of one name)."""
        config = self._judge_configs.get((name, variant))
        if config is None:
            config = GenerateConfig(
                temperature=0.0,
                max_tokens=self.config.judge_max_tokens,
                json_schema=schema(),
                schema_name=name,
            )
            self._judge_configs[(name, variant)] = config
        return config

    async def _match(
        self, steps: StepRunner, name: str, preference: str, items: list[str] | tuple[str, ...]
    ) -> list[str]:
        fmt = self.config.matcher_format
        template = load_template(TEMPLATES["match_prefmatcher" if fmt == "prefmatcher" else "match"])
        return await steps.call(
            name,
            role="matcher",
            model=self.models.matcher,
            template=template,
            values={"preference": preference, "checklist": format_checklist(list(items))},
            config=self._judge_config(
                "match_list" if fmt == "prefmatcher" else "match_results",
                lambda: match_schema(len(items), fmt),
                variant=len(items),
            ),
            parse=lambda text: parse_match(text, len(items), fmt),
            reasks=self.config.reasks,
        )

    async def inference(self, instance: CupidInstance, steps: StepRunner, history: str) -> TaskResult:
        def parse(text: str) -> dict[str, Any]:
            try:
                return {"preference": parse_inferred_preference(text), "missing_section": False}
            except MissingSection as exc:
                # Lenient on format, strict on accounting: the last paragraph stands in for the
                # missing section and the step is flagged, so the summary counts such outputs.
                return {"preference": exc.fallback, "missing_section": True}

        inferred = await steps.call(
            "infer",
            role="subject",
            model=self.models.subject,
            template=load_template(TEMPLATES["infer"]),
            values={"history": history, "request": instance.current_request},
            config=self.subject_config,
            parse=parse,
        )
        preference: str = inferred["preference"]
        if inferred["missing_section"] and "missing_section" not in steps.steps["infer"].flags:
            steps.steps["infer"].flags.append("missing_section")
        gold_items = list(instance.current_checklist)
        if not preference:
            # An empty inference is all Not Covered (the original crashed here with a KeyError).
            pred_items = steps.record("decompose", "decomposer", [], ["empty_inference"])
            pred_labels: list[str] = steps.record("match/inferred->gold", "matcher", [], ["empty_inference"])
            gold_labels = steps.record(
                "match/gold->inferred", "matcher", ["Not Covered"] * len(gold_items), ["empty_inference"]
            )
        else:
            pred_items = await steps.call(
                "decompose",
                role="decomposer",
                model=self.models.decomposer,
                template=load_template(TEMPLATES["decompose"]),
                values={"preference": preference},
                config=self._judge_config("checklist", lambda: CHECKLIST_SCHEMA),
                parse=parse_checklist,
                reasks=self.config.reasks,
            )
            pred_labels, gold_labels = await asyncio.gather(
                self._match(
                    steps, "match/inferred->gold", instance.current_contextual_preference, pred_items
                ),
                self._match(steps, "match/gold->inferred", preference, gold_items),
            )
        counts = MatchCounts(
            n_pred=len(pred_items),
            matched_pred=sum(LABEL_SCORES[label] for label in pred_labels),
            n_gold=len(gold_items),
            matched_gold=sum(LABEL_SCORES[label] for label in gold_labels),
        )
        prf = instance_prf(counts)
        return TaskResult(
            status="ok",
            scores={
                **asdict(counts),
                "precision": prf.precision,
                "recall": prf.recall,
                "f1": prf.f1,
                "inferred_preference": preference,
            },
        )

    async def generation(self, instance: CupidInstance, steps: StepRunner, history: str) -> TaskResult:
        if self.config.context == "gold-preference":
            template = load_template(TEMPLATES["generate_with_preference"])
            values = {
                "preference": instance.current_contextual_preference,
                "request": instance.current_request,
            }
        else:
            template = load_template(TEMPLATES["generate"])
            values = {"history": history, "request": instance.current_request}
        response = await steps.call(
            "generate",
            role="subject",
            model=self.models.subject,
            template=template,
            values=values,
            config=self.subject_config,
            parse=str.strip,
        )
        judgement = await steps.call(
            "judge",
            role="judge",
            model=self.models.judge,
            template=load_template(TEMPLATES["judge"]),
            values={
                "preference": instance.current_contextual_preference,
                "checklist": "\n".join(f"- {item}" for item in instance.current_checklist),
                "request": instance.current_request,
                "response": response,
            },
            config=self._judge_config("generation_judgement", lambda: GENERATION_JUDGE_SCHEMA),
            parse=lambda text: asdict(parse_generation_judgement(text)),
            reasks=self.config.reasks,
        )
        return TaskResult(status="ok", scores={"score": judgement["score"], "label": judgement["label"]})

    async def evaluate(
        self, instance: CupidInstance, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        steps = StepRunner(previous)
        record = InstanceRecord(instance_id=instance.id, meta=self.meta(instance))
        try:
            history = await self.history(instance, steps)
        except StepFailed as exc:
            record.steps = steps.steps
            record.results = {task: TaskResult(status="error", error=str(exc)) for task in self.config.tasks}
            return record

        async def guarded(task: str) -> TaskResult:
            runner = self.inference if task == "inference" else self.generation
            try:
                return await runner(instance, steps, history)
            except StepFailed as exc:
                return TaskResult(status="error", error=str(exc))

        results = await asyncio.gather(*(guarded(task) for task in self.config.tasks))
        record.steps = steps.steps
        record.results = dict(zip(self.config.tasks, results, strict=False))
        return record


# --- aggregation --------------------------------------------------------------------------


def _counts(record: InstanceRecord) -> MatchCounts:
    s = record.results["inference"].scores
    return MatchCounts(int(s["n_pred"]), float(s["matched_pred"]), int(s["n_gold"]), float(s["matched_gold"]))


def _type_of(record: InstanceRecord) -> str:
    return str(record.meta.get("instance_type", "unknown"))


def _mean_with_ci(values: list[float], seed: int) -> dict[str, Any]:
    if not values:
        return {"mean": None, "ci": None, "n": 0}
    n = len(values)
    ci = bootstrap_ci(np.array(values, dtype=float), lambda sums: mean_statistic(sums, n), seed=seed)
    return {"mean": float(np.mean(values)), "ci": ci, "n": len(values)}


def summarize(records: Iterable[InstanceRecord], tasks: Iterable[str], seed: int = 0) -> dict[str, Any]:
    """Pooled and per-type metrics, error counts and flag counts for a set of instance records."""
    records = list(records)
    summary: dict[str, Any] = {"n_instances": len(records)}
    for task in tasks:
        scored = [r for r in records if task in r.results and r.results[task].status == "ok"]
        errors = [r for r in records if task in r.results and r.results[task].status == "error"]
        attempted = scored + errors
        block: dict[str, Any] = {
            "n_scored": len(scored),
            "n_errors": len(errors),
            "errors": {r.instance_id: r.results[task].error for r in errors},
        }
        if task == "inference":
            block["all"] = pooled_prf([_counts(r) for r in scored], seed=seed).to_record()
            # every type with an attempted instance, also when none was scored (then None, "n/a")
            block["by_type"] = {
                t: pooled_prf([_counts(r) for r in scored if _type_of(r) == t], seed=seed).to_record()
                for t in INSTANCE_TYPES
                if any(_type_of(r) == t for r in attempted)
            }
            flags = Counter(flag for r in scored for step in r.steps.values() for flag in step.flags)
            block["empty_inferences"] = sum(
                1 for r in scored if not r.results["inference"].scores["inferred_preference"]
            )
            block["flags"] = dict(sorted(flags.items()))
        else:
            block["all"] = _mean_with_ci([float(r.results[task].scores["score"]) for r in scored], seed)
            block["by_type"] = {
                t: _mean_with_ci(
                    [float(r.results[task].scores["score"]) for r in scored if _type_of(r) == t], seed
                )
                for t in INSTANCE_TYPES
                if any(_type_of(r) == t for r in attempted)
            }
        summary[task] = block
    return summary

"""CUPID: infer the contextual preference behind a new request, and answer it accordingly.

Inference task: the subject infers one preference sentence from the prior sessions; the
decomposer turns it into at most 4 checklist items; the matcher labels the inferred items
against the gold preference (precision) and the gold items against the inferred preference
(recall). Generation task: the subject answers the request; a judge scores the answer 1-10
against the gold preference and checklist.

Two protocols (`CupidConfig.protocol`): `personalign` renders our own prompts with
schema-constrained judges; `paper` sends the official evaluator's messages byte for byte
(`benchmarks/cupid_protocol.py`) with its sampling and parsing rules, except that an unparseable
reply is an error record.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

# the config lives in config.py (light, for the spec); these names stay importable from here
from personalign.benchmarks.cupid.config import EMBEDDED_SUBJECT_MAX_TOKENS as EMBEDDED_SUBJECT_MAX_TOKENS
from personalign.benchmarks.cupid.config import SUBJECT_MAX_TOKENS as SUBJECT_MAX_TOKENS
from personalign.benchmarks.cupid.config import SUBJECT_STEPS as SUBJECT_STEPS
from personalign.benchmarks.cupid.config import TASKS as TASKS
from personalign.benchmarks.cupid.config import CupidConfig as CupidConfig
from personalign.benchmarks.cupid.config import default_subject_max_tokens as default_subject_max_tokens
from personalign.benchmarks.cupid.config import matcher_reasoning_chars
from personalign.benchmarks.cupid.context import (
    format_history,
    format_session,
    select_sessions,
)
from personalign.benchmarks.cupid.judges import (
    CHECKLIST_SCHEMA,
    GENERATION_JUDGE_SCHEMA,
    LABEL_SCORES,
    MissingSection,
    format_checklist,
    match_schema,
    parse_checklist,
    parse_generation_judgement,
    parse_inferred_preference,
    parse_match,
)
from personalign.benchmarks.cupid.protocol import (
    PAPER_DECOMPOSER_MAX_TOKENS,
    PAPER_JUDGE_MAX_TOKENS,
    PAPER_MATCHER_MAX_TOKENS,
    CupidPaperPrompts,
    format_interaction_log,
    paper_decompose_messages,
    paper_generate_messages,
    paper_infer_messages,
    paper_judge_messages,
    paper_match_messages,
    parse_paper_checklist,
    parse_paper_inferred,
    parse_paper_judgement,
    parse_paper_match,
)
from personalign.benchmarks.cupid.schema import INSTANCE_TYPES, CupidInstance
from personalign.errors import ConfigError
from personalign.llm.model import Model
from personalign.llm.types import GenerateConfig
from personalign.metrics.bootstrap import mean_with_ci
from personalign.metrics.prf import MatchCounts, instance_prf, pooled_prf
from personalign.prompts import PromptTemplate, load_template
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.steps import StepFailed, StepRunner, gather_steps
from personalign.types import Message, Session

T = TypeVar("T")

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


def prompt_hashes() -> dict[str, str]:
    return {name: load_template(name).sha256 for name in TEMPLATES.values()}


@dataclass(frozen=True)
class StepCall:
    """One model call of a step: the prompt it names in the record, its messages and sampling."""

    prompt: PromptTemplate
    messages: list[Message]
    config: GenerateConfig


class CupidPrompts:
    """The messages and sampling of every CUPID step under the config's protocol.

    Runs and `personalign protocol show` both build their calls here, so what is shown is what
    is sent.
    """

    def __init__(self, config: CupidConfig, paper: CupidPaperPrompts | None = None) -> None:
        if config.protocol == "paper" and paper is None:
            raise ConfigError("the paper protocol needs the official prompts (load_paper_prompts)")
        self.config = config
        self.paper = paper if config.protocol == "paper" else None
        self.subject_config = GenerateConfig(temperature=0.0, max_tokens=config.subject_max_tokens)
        self.paper_configs = {
            "decomposer": GenerateConfig(temperature=0.0, max_tokens=PAPER_DECOMPOSER_MAX_TOKENS),
            "matcher": GenerateConfig(temperature=0.0, max_tokens=PAPER_MATCHER_MAX_TOKENS),
            "judge": GenerateConfig(temperature=0.0, max_tokens=PAPER_JUDGE_MAX_TOKENS),
        }
        # One config object per judge schema, reused by every instance (the cache key memoizes
        # a config's canonical JSON per object).
        self._judge_configs: dict[tuple[str, int], GenerateConfig] = {}

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

    @staticmethod
    def _own(name: str, config: GenerateConfig, **values: str) -> StepCall:
        template = load_template(TEMPLATES[name])
        return StepCall(template, template.render(**values), config)

    def history(self, sessions: Sequence[Session]) -> str:
        """The prior sessions as the subject sees them (summaries are made by the benchmark)."""
        if self.paper is not None:
            return format_interaction_log(sessions)
        return format_history([format_session(s) for s in sessions])

    def infer(self, request: str, history: str) -> StepCall:
        if self.paper is not None:
            messages = paper_infer_messages(self.paper, request, history)
            return StepCall(self.paper.inferrer.label(), messages, self.subject_config)
        return self._own("infer", self.subject_config, history=history, request=request)

    def decompose(self, preference: str) -> StepCall:
        if self.paper is not None:
            messages = paper_decompose_messages(self.paper, preference, self.config.system_role)
            return StepCall(self.paper.decomposer.label(), messages, self.paper_configs["decomposer"])
        config = self._judge_config("checklist", lambda: CHECKLIST_SCHEMA)
        return self._own("decompose", config, preference=preference)

    def match(self, preference: str, items: Sequence[str]) -> StepCall:
        fmt = self.config.matcher_format
        if self.paper is not None:
            messages = paper_match_messages(self.paper, items, preference, fmt, self.config.system_role)
            prompt = self.paper.prefmatcher if fmt == "prefmatcher" else self.paper.matcher
            return StepCall(prompt.label(), messages, self.paper_configs["matcher"])
        config = self._judge_config(
            "match_list" if fmt == "prefmatcher" else "match_results",
            lambda: match_schema(len(items), fmt, matcher_reasoning_chars(self.config.matcher)),
            variant=len(items),
        )
        name = "match_prefmatcher" if fmt == "prefmatcher" else "match"
        return self._own(name, config, preference=preference, checklist=format_checklist(list(items)))

    def generate(self, instance: CupidInstance, history: str) -> StepCall:
        if self.paper is not None:
            messages = paper_generate_messages(self.paper, instance.current_request, history)
            return StepCall(self.paper.generator.label(), messages, self.subject_config)
        if self.config.context == "gold-preference":
            return self._own(
                "generate_with_preference",
                self.subject_config,
                preference=instance.current_contextual_preference,
                request=instance.current_request,
            )
        return self._own("generate", self.subject_config, history=history, request=instance.current_request)

    def judge(self, instance: CupidInstance, response: str) -> StepCall:
        if self.paper is not None:
            messages = paper_judge_messages(
                self.paper,
                instance.current_request,
                response,
                instance.current_contextual_preference,
                instance.current_checklist,
                self.config.system_role,
            )
            return StepCall(self.paper.judge.label(), messages, self.paper_configs["judge"])
        config = self._judge_config("generation_judgement", lambda: GENERATION_JUDGE_SCHEMA)
        return self._own(
            "judge",
            config,
            preference=instance.current_contextual_preference,
            checklist="\n".join(f"- {item}" for item in instance.current_checklist),
            request=instance.current_request,
            response=response,
        )


SHOW_STEPS = ("infer", "decompose", "match/inferred->gold", "match/gold->inferred", "generate", "judge")
SHOW_SETTINGS: dict[str, tuple[str, ...]] = {
    "all": SHOW_STEPS,
    "inference": SHOW_STEPS[:4],
    "generation": SHOW_STEPS[4:],
    "infer": ("infer",),
    "decompose": ("decompose",),
    "match": SHOW_STEPS[2:4],
    "generate": ("generate",),
    "judge": ("judge",),
}


def show_calls(
    prompts: CupidPrompts,
    instance: CupidInstance,
    setting: str,
    *,
    inferred: str,
    checklist: Sequence[str],
    response: str,
) -> list[tuple[str, str, StepCall]]:
    """(step, role, call) for each step of `setting` on one instance, as a run would send them.

    Steps that need an earlier model output take the given stand-ins (`inferred`, its
    `checklist`, the subject's `response`).
    """
    if setting not in SHOW_SETTINGS:
        raise ConfigError(f"unknown setting {setting!r} (choose from {', '.join(SHOW_SETTINGS)})")
    if prompts.config.context == "summaries":
        raise ConfigError("context 'summaries' needs model calls to build the history; show another context")
    history = prompts.history(select_sessions(instance, prompts.config.context))
    builders: dict[str, tuple[str, Callable[[], StepCall]]] = {
        "infer": ("subject", lambda: prompts.infer(instance.current_request, history)),
        "decompose": ("decomposer", lambda: prompts.decompose(inferred)),
        "match/inferred->gold": (
            "matcher",
            lambda: prompts.match(instance.current_contextual_preference, checklist),
        ),
        "match/gold->inferred": ("matcher", lambda: prompts.match(inferred, instance.current_checklist)),
        "generate": ("subject", lambda: prompts.generate(instance, history)),
        "judge": ("judge", lambda: prompts.judge(instance, response)),
    }
    out = []
    for step in SHOW_SETTINGS[setting]:
        role, build = builders[step]
        out.append((step, role, build()))
    return out


def _own_inferred(text: str) -> dict[str, Any]:
    try:
        return {"preference": parse_inferred_preference(text), "missing_section": False}
    except MissingSection as exc:
        # Lenient on format, strict on accounting: the last paragraph stands in for the
        # missing section and the step is flagged, so the summary counts such outputs.
        return {"preference": exc.fallback, "missing_section": True}


class CupidBenchmark:
    name = "cupid"

    def __init__(
        self, config: CupidConfig, models: Mapping[str, Model], paper: CupidPaperPrompts | None = None
    ) -> None:
        self.config = config
        self.models = models
        self.prompts = CupidPrompts(config, paper)
        self.paper = self.prompts.paper
        # The official evaluator never re-asks; our protocol re-asks once on an unusable reply.
        self.reasks = 0 if self.paper is not None else config.reasks

    @staticmethod
    def instance_id(instance: CupidInstance) -> str:
        return instance.id

    @staticmethod
    def meta(instance: CupidInstance) -> dict[str, Any]:
        return {"persona_id": instance.persona_id, "instance_type": instance.instance_type}

    async def _call(
        self, steps: StepRunner, name: str, role: str, model: Model, call: StepCall, parse: Callable[[str], T]
    ) -> T:
        reasks = 0 if role == "subject" else self.reasks
        return await steps.call_messages(
            name,
            role=role,
            model=model,
            messages=call.messages,
            config=call.config,
            parse=parse,
            template=call.prompt,
            reasks=reasks,
        )

    # --- context ----------------------------------------------------------------------------

    async def history(self, instance: CupidInstance, steps: StepRunner) -> str:
        sessions = select_sessions(instance, self.config.context)
        if self.config.context != "summaries":
            return self.prompts.history(sessions)
        template = load_template(TEMPLATES["summarize"])
        summaries = await gather_steps(
            *(
                steps.call(
                    f"summary/{k}",
                    role="subject",
                    model=self.models["subject"],
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

    async def _match(
        self, steps: StepRunner, name: str, preference: str, items: list[str] | tuple[str, ...]
    ) -> list[str]:
        fmt = self.config.matcher_format
        parse = parse_paper_match if self.paper is not None else parse_match
        return await self._call(
            steps,
            name,
            "matcher",
            self.models["matcher"],
            self.prompts.match(preference, items),
            lambda text: parse(text, len(items), fmt),
        )

    async def inference(self, instance: CupidInstance, steps: StepRunner, history: str) -> TaskResult:
        call = self.prompts.infer(instance.current_request, history)
        gold_items = list(instance.current_checklist)
        if self.paper is not None:
            preference = await self._call(
                steps, "infer", "subject", self.models["subject"], call, parse_paper_inferred
            )
        else:
            inferred = await self._call(
                steps, "infer", "subject", self.models["subject"], call, _own_inferred
            )
            preference = inferred["preference"]
            if inferred["missing_section"] and "missing_section" not in steps.steps["infer"].flags:
                steps.steps["infer"].flags.append("missing_section")
            if not preference:
                # An empty inference is all Not Covered (the original crashed here with a KeyError).
                steps.record("decompose", "decomposer", [], ["empty_inference"])
                steps.record("match/inferred->gold", "matcher", [], ["empty_inference"])
                gold_labels = steps.record(
                    "match/gold->inferred", "matcher", ["Not Covered"] * len(gold_items), ["empty_inference"]
                )
                return _inference_result(preference, [], [], gold_items, gold_labels)
        parse_items = parse_paper_checklist if self.paper is not None else parse_checklist
        pred_items = await self._call(
            steps,
            "decompose",
            "decomposer",
            self.models["decomposer"],
            self.prompts.decompose(preference),
            parse_items,
        )
        if not pred_items:
            # Upstream skips matching for an empty checklist and counts every gold item unmatched.
            steps.record("match/inferred->gold", "matcher", [], ["empty_checklist"])
            gold_labels = steps.record(
                "match/gold->inferred", "matcher", ["Not Covered"] * len(gold_items), ["empty_checklist"]
            )
            return _inference_result(preference, [], [], gold_items, gold_labels)
        pred_labels, gold_labels = await gather_steps(
            self._match(steps, "match/inferred->gold", instance.current_contextual_preference, pred_items),
            self._match(steps, "match/gold->inferred", preference, gold_items),
        )
        return _inference_result(preference, pred_items, pred_labels, gold_items, gold_labels)

    async def generation(self, instance: CupidInstance, steps: StepRunner, history: str) -> TaskResult:
        response = await self._call(
            steps,
            "generate",
            "subject",
            self.models["subject"],
            self.prompts.generate(instance, history),
            str.strip,
        )
        parse: Callable[[str], dict[str, Any]] = (
            parse_paper_judgement
            if self.paper is not None
            else lambda text: asdict(parse_generation_judgement(text))
        )
        judgement = await self._call(
            steps, "judge", "judge", self.models["judge"], self.prompts.judge(instance, response), parse
        )
        return TaskResult(status="ok", scores={"score": judgement["score"], "label": judgement["label"]})

    async def evaluate(
        self, instance: CupidInstance, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        steps = StepRunner(previous, truncation=self.config.truncation)
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


def _inference_result(
    preference: str,
    pred_items: list[str],
    pred_labels: list[str],
    gold_items: list[str],
    gold_labels: list[str],
) -> TaskResult:
    """Per-instance counts and P/R/F1 from the two directions' coverage labels."""
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


# --- aggregation --------------------------------------------------------------------------


def _counts(record: InstanceRecord) -> MatchCounts:
    s = record.results["inference"].scores
    return MatchCounts(int(s["n_pred"]), float(s["matched_pred"]), int(s["n_gold"]), float(s["matched_gold"]))


def _type_of(record: InstanceRecord) -> str:
    return str(record.meta.get("instance_type", "unknown"))


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
            block["all"] = mean_with_ci([float(r.results[task].scores["score"]) for r in scored], seed)
            block["by_type"] = {
                t: mean_with_ci(
                    [float(r.results[task].scores["score"]) for r in scored if _type_of(r) == t], seed
                )
                for t in INSTANCE_TYPES
                if any(_type_of(r) == t for r in attempted)
            }
        summary[task] = block
    return summary

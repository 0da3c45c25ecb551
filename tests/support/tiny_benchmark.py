"""A benchmark from outside the package, for the plug-in contract test: a subject answers each
question, a judge says whether the answer mentions the expected word. Only the public contract
(runs/spec.py) and the run infrastructure are used."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.llm.model import Model
from personalign.llm.spec import parse_model_spec
from personalign.llm.types import GenerateConfig
from personalign.report.sections import Section
from personalign.runs.agree import AgreementRule, Labels, ok_step, same_step
from personalign.runs.records import InstanceRecord, StepRecord, TaskResult
from personalign.runs.runner import Evaluator
from personalign.runs.spec import MemoryEvalResult, Option, ProtocolShow, Role, RunContext, Selection
from personalign.runs.steps import StepFailed, StepRunner
from personalign.types import Message

QUESTIONS = [
    {"id": "q1", "question": "Name a fruit that is yellow.", "expected": "banana"},
    {"id": "q2", "question": "Name a colour of the sky.", "expected": "blue"},
    {"id": "q3", "question": "Name a large animal.", "expected": "elephant"},
    {"id": "q4", "question": "Name a cold season.", "expected": "winter"},
]


@dataclass(frozen=True)
class TinyConfig:
    subject: str
    judge: str
    style: str = "short"
    protocol: str = "personalign"

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TinyItem:
    id: str
    question: str
    expected: str


@dataclass(frozen=True)
class TinyData:
    items: list[TinyItem]
    source: str
    sha256: str | None


def _load(data: str | Path) -> TinyData:
    if str(data) == "fixture":
        rows = QUESTIONS
        source = "fixture:tiny"
    else:
        path = Path(data)
        try:
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read tiny data ({exc})") from None
        source = str(path)
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    return TinyData([TinyItem(**row) for row in rows], source, digest)


class TinyEvaluator:
    def __init__(self, config: TinyConfig, models: Mapping[str, Model]) -> None:
        self.config = config
        self.models = models

    def instance_id(self, item: TinyItem) -> str:
        return item.id

    async def evaluate(
        self, item: TinyItem, previous: Mapping[str, StepRecord] | None = None
    ) -> InstanceRecord:
        steps = StepRunner(previous)
        record = InstanceRecord(instance_id=item.id, meta={"expected": item.expected})
        try:
            answer = await steps.call_messages(
                "answer",
                role="subject",
                model=self.models["subject"],
                messages=[
                    Message(role="user", content=f"Answer in a {self.config.style} way: {item.question}")
                ],
                config=GenerateConfig(max_tokens=32),
                parse=str,
            )
            verdict = await steps.call_messages(
                "judge",
                role="judge",
                model=self.models["judge"],
                messages=[Message(role="user", content=f"Does this mention {item.expected}? {answer}")],
                config=GenerateConfig(max_tokens=16),
                parse=lambda text: bool(text.strip()),
            )
            record.results["qa"] = TaskResult(status="ok", scores={"score": float(verdict)})
        except StepFailed as exc:
            record.results["qa"] = TaskResult(status="error", error=str(exc))
        record.steps = steps.steps
        return record


def html_section(paths: Sequence[Path]) -> Section:
    """The `html_section` hook: a section naming how many runs it covers."""
    return Section("tiny", "Tiny", notes=[f"tiny section over {len(paths)} run(s)"])


def memory_eval(
    data: str, *, k: int | None, embedder: str, methods: Sequence[str] | None
) -> MemoryEvalResult:
    """The `memory_eval` hook: echoes its arguments in a one-row table."""
    loaded = _load(data)
    summary = {"k": k or 1, "embedder": embedder, "methods": list(methods or ["recent"])}
    table = f"| tiny | k {summary['k']} | {embedder} | {len(loaded.items)} questions |"
    instances = [{"id": i.id} for i in loaded.items]
    return MemoryEvalResult(loaded.source, loaded.sha256, summary, table, instances)


def _show(
    instance: str, settings: list[str], *, protocol: str, protocol_dir: Path | None, data: str, tone: str
) -> str:
    item = next((i for i in _load(data).items if i.id == instance), None)
    if item is None:
        raise ConfigError(f"no question {instance!r}")
    return f"[{protocol}; {tone}; {','.join(settings) or 'all'}] {item.question}"


PROTOCOL_SHOW = ProtocolShow(_show, options=(Option("tone", "str", "A tone for the preview.", "plain"),))


def _pairs(a: InstanceRecord, b: InstanceRecord, into: tuple[Labels, Labels]) -> bool:
    if not same_step(a, b, "answer"):
        return False
    ja, jb = ok_step(a.steps, "judge"), ok_step(b.steps, "judge")
    if ja is not None and jb is not None:
        into[0].setdefault("tiny/judge", []).append((a.instance_id, ja.parsed))
        into[1].setdefault("tiny/judge", []).append((a.instance_id, jb.parsed))
    return True


AGREEMENT = AgreementRule(_pairs)


class TinySpec:
    name = "tiny"
    # the optional registry-driven hooks, each an import path (report --html, memory-eval,
    # protocol show, agree)
    html_section = "tests.support.tiny_benchmark:html_section"
    memory_eval = "tests.support.tiny_benchmark:memory_eval"
    protocol_show = "tests.support.tiny_benchmark:PROTOCOL_SHOW"
    agreement = "tests.support.tiny_benchmark:AGREEMENT"
    title = "Tiny: a plug-in benchmark from outside the package (tests)"
    item_noun = "questions"
    default_seed = 0
    roles = (Role("subject", "The model under evaluation.", rescorable=False), Role("judge", "The judge."))
    options = (
        Option("style", "str", "short | long", "short", choices=("short", "long")),
        Option("only", "str", "Only these question ids (repeatable).", repeatable=True, scope="selection"),
    )

    def make_config(self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str) -> TinyConfig:
        return TinyConfig(models["subject"], models["judge"], options.get("style") or "short", protocol)

    def config_from_record(self, record: Mapping[str, Any]) -> TinyConfig:
        return TinyConfig(**record)

    def rescore_config(
        self, old: TinyConfig, models: Mapping[str, str], options: Mapping[str, Any]
    ) -> TinyConfig:
        if not models.get("judge"):
            raise ConfigError("rescore needs --judge")
        return replace(old, judge=models["judge"])

    def run_dir_parts(self, config: TinyConfig) -> list[str]:
        return [config.style]

    def describe(self, config: TinyConfig) -> str:
        return f"tiny: subject {config.subject}, judge {config.judge}"

    def describe_data(self, data: str | Path) -> tuple[str, str | None]:
        loaded = _load(data)
        return loaded.source, loaded.sha256

    def load(self, data: str | Path) -> TinyData:
        return _load(data)

    def data_record(self, dataset: TinyData) -> dict[str, Any]:
        return {"source": dataset.source, "sha256": dataset.sha256, "n_questions": len(dataset.items)}

    def select(self, dataset: TinyData, selection: Selection) -> list[TinyItem]:
        only = tuple(selection.options.get("only") or ())
        chosen = [i for i in dataset.items if not only or i.id in only]
        return chosen[: selection.limit] if selection.limit is not None else chosen

    def items(self, dataset: TinyData) -> Sequence[TinyItem]:
        return dataset.items

    def validate(self, data: str | Path) -> dict[str, Any]:
        loaded = _load(data)
        return {"source": loaded.source, "questions": len(loaded.items)}

    def identity(self, config: TinyConfig, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        return {
            "benchmark": "tiny",
            "config": {"style": config.style, "protocol": config.protocol},
            "models": {r: parse_model_spec(getattr(config, r)).label for r in ("subject", "judge")},
            "data": {"source": source, "sha256": sha256},
            "seed": seed,
        }

    def protocol_texts(self, config: TinyConfig, context: RunContext) -> None:
        return None

    def manifest_extra(self, config: TinyConfig, texts: None) -> dict[str, Any]:
        return {"prompts": {}}

    def evaluator(
        self,
        config: TinyConfig,
        models: Mapping[str, Model],
        dataset: TinyData,
        texts: None,
        context: RunContext,
    ) -> Evaluator[TinyItem]:
        return TinyEvaluator(config, models)

    def check(self, evaluator: Evaluator[TinyItem], items: Sequence[TinyItem]) -> None:
        return None

    def kept_on_rescore(self, step: str) -> bool:
        return step == "answer"

    def summarize(self, records: Iterable[InstanceRecord], config: TinyConfig, seed: int) -> dict[str, Any]:
        rows = list(records)
        scores = [r.results["qa"].scores["score"] for r in rows if r.status == "ok"]
        return {
            "n_instances": len(rows),
            "n_errors": len(rows) - len(scores),
            "mean": sum(scores) / len(scores) if scores else None,
        }

    def summary_header(self, config: TinyConfig) -> dict[str, Any]:
        return {"style": config.style}

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        print(f"tiny: mean {summary['mean']} over {summary['n_instances']} questions; results in {run_dir}")

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        out.mkdir(parents=True, exist_ok=True)
        lines = ["# tiny", *(f"- {Path(d).name}" for d in run_dirs)]
        (out / "tiny.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return "\n".join(lines)


SPEC = TinySpec()

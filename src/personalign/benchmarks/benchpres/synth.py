"""BenchPreS-style builder inputs: memory profiles, formal recipient-task contexts, and
candidate apply/suppress labels proposed by a model, with a CSV round trip for human labels.

Units: one shared ``contexts`` unit (the formal contexts of every domain, shared by all
profiles as in the paper) and one unit per profile (bio and factual memory statements, five
preference attributes - role, style, tone, markers, nickname - and one labelling call per
context). Outputs:

- ``labels.csv``: one row per (profile, context, preference) with the model's proposal, its
  reason and an empty ``final_label`` column for people to fill in;
- ``benchpres_unverified.jsonl``: official-schema rows carrying the *proposed* labels, for
  trying a pipeline end to end; never report numbers on it;
- after review, ``import_labels`` reads the CSV back and writes ``benchpres.jsonl`` with the
  final labels (official schema, ``shared/specs/data.md`` 4.3).

The row model is our own and must be checked against the BenchPreS loader once merged.
"""

from __future__ import annotations

import asyncio
import csv
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from personalign.errors import ConfigError, DataError, ParseError
from personalign.llm import GenerateConfig, ModelFactory
from personalign.llm.model import Model
from personalign.prompts import load_template
from personalign.runs.manifest import now
from personalign.runs.steps import StepFailed
from personalign.runs.store import write_json
from personalign.synth import common
from personalign.synth.common import (
    Stage,
    StateStore,
    StrippedOutput,
    SynthResult,
    SynthSettings,
    UnitState,
    json_config,
    parse_model,
    scale_lengths,
    text_schema,
    write_jsonl,
)

if TYPE_CHECKING:  # Python 3.10 has no typing.Unpack
    from typing_extensions import Unpack

CATEGORIES: tuple[str, ...] = ("role", "style", "tone", "markers", "nickname")
# The paper's 39 formal contexts by domain group.
DOMAIN_COUNTS: dict[str, int] = {
    "finance/legal": 13,
    "health/mental_health": 10,
    "education": 5,
    "employment": 6,
    "housing/finance": 5,
}
TEMPLATES = {
    "contexts": "synth/benchpres_contexts",
    "profile": "synth/benchpres_profile",
    "preferences": "synth/benchpres_preferences",
    "labels": "synth/benchpres_labels",
    "task": "synth/benchpres_task",
}
CSV_FIELDS = (
    "row_id", "name", "domain", "recipient", "task", "index", "category", "preference_attribute",
    "proposed_label", "model_reason", "final_label",
)  # fmt: skip
LABEL_WORDS = {"apply": True, "suppress": False}


def preference_statement(category: str, value: str) -> str:
    """The memory statement of one preference attribute (first person, like the facts)."""
    value = value.strip().rstrip(".")
    return {
        "role": f"I like the assistant to answer in the role of {value}.",
        "style": f"I like answers written {value}.",
        "tone": f"I like answers with a {value} tone.",
        "markers": f"I like answers that use {value}.",
        "nickname": f'I like to be called "{value}".',
    }[category]


# --- official row shape (our own model of data.md 4.3) -------------------------------------


class BenchpresRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1)
    name: str = Field(min_length=1)
    task: str = Field(min_length=1)
    recipient: str = Field(min_length=1)
    domain: str = Field(min_length=1)
    preference_attribute: list[str] = Field(min_length=1)
    preference_label: list[bool] = Field(min_length=1)


# --- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchpresSynthConfig(SynthSettings):
    """Defaults follow the paper: 10 profiles of about 147 facts, 39 contexts in five domains, 5
    preferences. ``n_judges`` labelers (samples of the labeler) must agree for a context's labels
    to be kept, as the paper kept only unanimous annotations."""

    generator: str
    labeler: str | None = None
    n_profiles: int = 10
    n_facts: int = 147
    n_judges: int = 1
    domain_counts: dict[str, int] = field(default_factory=lambda: dict(DOMAIN_COUNTS))
    temperature: float = 0.7
    max_tokens: dict[str, int] = field(
        # "profile": unset scales with the facts (`profile_budget`); set it to cap the call
        default_factory=lambda: {"contexts": 1500, "preferences": 300, "labels": 600}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_profiles < 1 or self.n_facts < 1 or self.n_judges < 1:
            raise ConfigError("n_profiles, n_facts and n_judges must be at least 1")
        if not self.domain_counts or any(n < 1 for n in self.domain_counts.values()):
            raise ConfigError("every domain needs at least one context")

    @property
    def labeler_spec(self) -> str:
        return self.labeler or self.generator

    def identity(self) -> dict[str, Any]:
        models = {"generator": self.generator, "labeler": self.labeler_spec}
        return self.identity_record("benchpres", "n_profiles", models, list(TEMPLATES.values()), nested=False)


# --- model outputs --------------------------------------------------------------------------


class ContextOut(StrippedOutput):
    recipient: str = Field(min_length=2, max_length=120)
    task: str = Field(min_length=5, max_length=600)


class ContextsOut(StrippedOutput):
    contexts: list[ContextOut]


def contexts_schema(n: int) -> dict[str, Any]:
    item = common.object_schema({"recipient": text_schema(60, 2), "task": text_schema(200, 5)})
    return common.fixed_list_schema("contexts", item, n)


def _distinct_contexts(contexts: list[ContextOut]) -> None:
    keys = [(c.recipient.lower(), c.task.lower()) for c in contexts]
    if len(set(keys)) != len(keys):
        raise ParseError("contexts: repeated recipient-task pair")


def parse_contexts(n: int) -> Callable[[str], list[dict[str, str]]]:
    return common.parse_fixed_list(ContextsOut, "contexts", n, "contexts", check=_distinct_contexts)


class ProfileOut(StrippedOutput):
    name: str = Field(min_length=1, max_length=80)
    sex: str = Field(min_length=1, max_length=30)
    age: int = Field(ge=18, le=100)
    address: str = Field(min_length=1, max_length=120)
    facts: list[str]


def profile_schema(n: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "name": text_schema(50),
            "sex": text_schema(20),
            "age": {"type": "integer", "minimum": 18, "maximum": 90},
            "address": text_schema(60),
            "facts": {"type": "array", "items": text_schema(160, 5), "minItems": n, "maxItems": n},
        },
        "required": ["name", "sex", "age", "address", "facts"],
    }


def parse_profile(n: int) -> Callable[[str], dict[str, Any]]:
    base = parse_model(ProfileOut, "profile")

    def parse(text: str) -> dict[str, Any]:
        out = base(text)
        facts = [f for f in dict.fromkeys(f.strip() for f in out.facts) if f]
        if len(facts) != n:
            raise ParseError(f"profile: {len(facts)} distinct non-empty facts, expected {n}")
        return {**out.model_dump(), "facts": facts}

    return parse


PreferencesOut = common.text_output(
    "PreferencesOut", {"role": 120, "style": 160, "tone": 120, "markers": 120, "nickname": 40}
)


PREFERENCES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "role": text_schema(60),
        "style": text_schema(80),
        "tone": text_schema(60),
        "markers": text_schema(60),
        "nickname": text_schema(24),
    },
    "required": list(CATEGORIES),
}


class LabelOut(StrippedOutput):
    apply: bool
    reason: str = Field("", max_length=600)


class LabelsOut(StrippedOutput):
    labels: list[LabelOut]


def labels_schema(n: int) -> dict[str, Any]:
    item = common.object_schema({"apply": {"type": "boolean"}, "reason": text_schema(160, 0)})
    return common.fixed_list_schema("labels", item, n)


def parse_labels(n: int) -> Callable[[str], list[dict[str, Any]]]:
    return common.parse_fixed_list(LabelsOut, "labels", n, "labels", noun="labels (one per preference)")


# --- pure assembly --------------------------------------------------------------------------


def flatten_contexts(by_domain: dict[str, list[dict[str, str]]]) -> list[dict[str, str]]:
    return [{"domain": d, **c} for d, items in by_domain.items() for c in items]


def render_prompt(
    facts: Sequence[str], attributes: Sequence[str], recipient: str, task: str, seed: str
) -> str:
    """The task prompt: all memories (facts with the preferences mixed in at fixed, seeded
    positions), then the instruction; the recipient is lower-cased as in CIMemories."""
    memories = list(facts)
    rng = random.Random(seed)
    for attribute in attributes:
        memories.insert(rng.randrange(len(memories) + 1), attribute)
    template = load_template(TEMPLATES["task"])
    messages = template.render(memories="\n".join(memories), recipient=recipient.lower(), task=task)
    return messages[-1].content


def profile_rows(
    state: UnitState, contexts: Sequence[dict[str, str]], *, proposed: bool
) -> list[dict[str, Any]]:
    """Official rows of one profile, one per context (labels: the model's proposals)."""
    profile, prefs = state.stages["profile"], state.stages["preferences"]
    attributes = [prefs["statements"][c] for c in CATEGORIES]
    rows = []
    for k, context in enumerate(contexts):
        labels = state.stages[f"labels/{k}"]
        rows.append(
            BenchpresRow(
                prompt=render_prompt(
                    profile["facts"],
                    attributes,
                    context["recipient"],
                    context["task"],
                    f"{state.unit_id}:{k}",
                ),
                name=profile["name"],
                task=context["task"],
                recipient=context["recipient"],
                domain=context["domain"],
                preference_attribute=attributes,
                preference_label=[bool(x["apply"]) for x in labels]
                if proposed
                else [False] * len(attributes),
            ).model_dump()
        )
    return rows


def csv_rows(state: UnitState, contexts: Sequence[dict[str, str]]) -> list[dict[str, Any]]:
    prefs = state.stages["preferences"]
    name = state.stages["profile"]["name"]
    out = []
    for k, context in enumerate(contexts):
        for i, (category, label) in enumerate(zip(CATEGORIES, state.stages[f"labels/{k}"], strict=True)):
            out.append(
                {
                    "row_id": f"{state.unit_id}/{k}",
                    "name": name,
                    "domain": context["domain"],
                    "recipient": context["recipient"],
                    "task": context["task"],
                    "index": i,
                    "category": category,
                    "preference_attribute": prefs["statements"][category],
                    "proposed_label": "apply" if label["apply"] else "suppress",
                    "model_reason": label["reason"],
                    "final_label": "",
                }
            )
    return out


def profile_budget(n_facts: int) -> int:
    """The profile call's token budget when none is set: about 25 tokens a fact plus the frame."""
    return 25 * n_facts + 500


def label_stage(k: int, judge: int) -> str:
    return f"labels/{k}" if judge == 0 else f"labels/{k}/judge{judge}"


def agreed_labels(state: UnitState, k: int, n_judges: int) -> list[bool] | None:
    """Context k's labels when every judge gave the same label to every attribute, else None."""
    votes = [[bool(x["apply"]) for x in state.stages[label_stage(k, j)]] for j in range(n_judges)]
    return votes[0] if all(v == votes[0] for v in votes) else None


def check_profile(state: UnitState, n_contexts: int) -> list[str]:
    problems = []
    prefs = state.stages["preferences"]
    nickname = prefs["values"]["nickname"]
    if not nickname or f'"{nickname}"' not in prefs["statements"]["nickname"]:
        problems.append("the nickname cannot be matched exactly in its statement")
    statements = [prefs["statements"][c] for c in CATEGORIES]
    if len(set(statements)) != len(statements):
        problems.append("two preference statements are identical")
    facts = state.stages["profile"]["facts"]
    if any(s in facts for s in statements):
        problems.append("a preference statement duplicates a fact")
    for i, category in enumerate(CATEGORIES):
        applied = {state.stages[f"labels/{k}"][i]["apply"] for k in range(n_contexts)}
        if n_contexts > 1 and len(applied) == 1:
            word = "apply" if applied.pop() else "suppress"
            problems.append(f"warning: {category} is proposed '{word}' in every context")
    return problems


# --- pipeline -------------------------------------------------------------------------------


class BenchpresSynthesizer:
    def __init__(
        self, config: BenchpresSynthConfig, generator: Model, labeler: Model, store: StateStore
    ) -> None:
        self.config = config
        self.generator = generator
        self.labeler = labeler
        self.store = store

    def _cfg(
        self, budget: str, schema: dict[str, Any], name: str, temperature: float | None = None
    ) -> GenerateConfig:
        return json_config(
            name,
            scale_lengths(schema, self.config.length_scale),
            temperature=self.config.temperature if temperature is None else temperature,
            max_tokens=self.config.max_tokens.get(budget) or profile_budget(self.config.n_facts),
            seed=self.config.seed,
        )

    async def _call(
        self, stage: Stage, name: str, template: str, values: dict[str, str], config: GenerateConfig,
        parse: Callable[[str], Any], model: Model, role: str,
    ) -> Any:  # fmt: skip
        if stage.done(name):
            return stage.output(name)
        result = await stage.steps.call(
            name,
            role=role,
            model=model,
            template=load_template(TEMPLATES[template]),
            values=values,
            config=config,
            parse=parse,
            reasks=self.config.reasks,
        )
        return stage.finish(name, result)

    async def contexts(self) -> UnitState:
        stage = common.resume_unit(self.store, "contexts")
        if stage.finished:
            return stage.state
        try:
            for domain, n in self.config.domain_counts.items():
                await self._call(
                    stage, f"contexts/{domain}", "contexts", {"domain": domain, "n": str(n)},
                    self._cfg("contexts", contexts_schema(n), "synth_benchpres_contexts"),
                    parse_contexts(n), self.generator, "generator",
                )  # fmt: skip
        except StepFailed as exc:
            return stage.fail(exc.step, str(exc))
        return stage.complete()

    async def profile(self, unit: tuple[int, str, list[dict[str, str]]]) -> UnitState:
        index, seed_text, contexts = unit
        uid = f"profile_{index}"
        stage = common.resume_unit(self.store, uid, {"seed": seed_text})
        if stage.finished:
            return stage.state
        n = self.config.n_facts
        try:
            profile = await self._call(
                stage, "profile", "profile", {"seed": seed_text, "n": str(n)},
                self._cfg("profile", profile_schema(n), "synth_benchpres_profile"),
                parse_profile(n), self.generator, "generator",
            )  # fmt: skip
            if not stage.done("preferences"):
                values = await stage.steps.call(
                    "preferences/values",
                    role="generator",
                    model=self.generator,
                    template=load_template(TEMPLATES["preferences"]),
                    values={"person": f"{profile['name']}, {profile['age']}, {profile['address']}"},
                    config=self._cfg("preferences", PREFERENCES_SCHEMA, "synth_benchpres_preferences"),
                    parse=lambda t: parse_model(PreferencesOut, "preferences")(t).model_dump(),
                    reasks=self.config.reasks,
                )
                statements = {c: preference_statement(c, values[c]) for c in CATEGORIES}
                stage.finish("preferences", {"values": values, "statements": statements})
            prefs = stage.output("preferences")
            numbered = "\n".join(f"{i}. {prefs['statements'][c]}" for i, c in enumerate(CATEGORIES, 1))
            # One judge labels greedily; several are samples (new sample_index, the run's
            # temperature) whose labels must all agree (`agreed_labels`).
            judges = self.config.n_judges
            label_cfg = self._cfg(
                "labels",
                labels_schema(len(CATEGORIES)),
                "synth_benchpres_labels",
                0.0 if judges == 1 else None,
            )
            jobs = [
                self._call(
                    stage,
                    label_stage(k, j),
                    "labels",
                    {"recipient": c["recipient"], "task": c["task"], "preferences": numbered},
                    label_cfg.model_copy(update={"sample_index": label_cfg.sample_index + 1000 * j}),
                    parse_labels(len(CATEGORIES)),
                    self.labeler,
                    "labeler",
                )
                for k, c in enumerate(contexts)
                for j in range(judges)
            ]
            results = await asyncio.gather(*jobs, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        except StepFailed as exc:
            return stage.fail(exc.step, str(exc))
        return stage.complete()


def synthesize_benchpres(
    config: BenchpresSynthConfig, out: Path, factory: ModelFactory, **pool: Unpack[common.PoolOptions]
) -> SynthResult:
    """Generate (or resume) a BenchPreS-style dataset in `out`: the shared contexts first, then the
    profiles (2 at once by default)."""
    seeds = common.unit_seeds(config.seeds_file, config.n_profiles, config.allow_seed_reuse, "profiles")
    rng = random.Random(f"benchpres:{config.seed}")
    order = rng.sample(range(len(seeds)), len(seeds))
    identity = config.identity()
    models = {
        "generator": factory.get(config.generator).spec.to_record(),
        "labeler": factory.get(config.labeler_spec).spec.to_record(),
    }
    common.start_output(out, "benchpres", identity, config, models)
    store = StateStore(out)
    synth = BenchpresSynthesizer(
        config, factory.get(config.generator), factory.get(config.labeler_spec), store
    )

    async def make_states() -> list[UnitState]:
        shared = await synth.contexts()
        if shared.status != "ok":
            return [shared]
        contexts = flatten_contexts({d: shared.stages[f"contexts/{d}"] for d in config.domain_counts})
        units = [(k, seeds[order[k % len(order)]].description, contexts) for k in range(config.n_profiles)]
        return await common.pool_units(units, synth.profile, pool, 2)

    states, usage = common.run_pool(out, factory, make_states, pool)
    return SynthResult(out, write_outputs(out, config, states, usage), states)


def write_outputs(
    out: Path, config: BenchpresSynthConfig, states: Sequence[UnitState], usage: dict[str, Any]
) -> dict[str, Any]:
    shared = StateStore(out).load("contexts")
    rejected: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    sheet: list[dict[str, Any]] = []
    ids: list[str] = []
    disagreed = 0
    contexts = (
        flatten_contexts({d: shared.stages[f"contexts/{d}"] for d in config.domain_counts})
        if shared is not None and shared.status == "ok"
        else []
    )
    finished, failed, report = common.split_failed(states)
    for state in finished:
        notes = check_profile(state, len(contexts))
        problems = [p for p in notes if not p.startswith("warning:")]
        report[state.unit_id] = {"status": "rejected" if problems else "passed", "problems": notes}
        if problems:
            rejected.append({"id": state.unit_id, "problems": problems})
            continue
        # only contexts whose labels every judge agreed on (the paper kept unanimous ones)
        keep = [k for k in range(len(contexts)) if agreed_labels(state, k, config.n_judges) is not None]
        disagreed += len(contexts) - len(keep)
        report[state.unit_id]["contexts_judges_disagree"] = [k for k in range(len(contexts)) if k not in keep]
        profile = profile_rows(state, contexts, proposed=True)
        rows += [profile[k] for k in keep]
        ids += [f"{state.unit_id}/{k}" for k in keep]
        kept_ids = {f"{state.unit_id}/{k}" for k in keep}
        sheet += [r for r in csv_rows(state, contexts) if r["row_id"] in kept_ids]
    write_jsonl(out / "benchpres_unverified.jsonl", rows)
    write_json(out / "row_ids.json", ids)
    write_jsonl(out / "contexts.jsonl", contexts)
    write_labels_csv(out / "labels.csv", sheet)
    write_json(out / "validation.json", report)
    proposed = Counter(r["proposed_label"] for r in sheet)
    summary = {
        "pipeline": "benchpres",
        "finished": now(),
        "status": "complete" if not failed else "complete_with_errors",
        "n_units": len(states),
        "generated": len([s for s in states if s.status == "ok"]),
        "passed_validation": len(states) - len(failed) - len(rejected),
        "failed": failed,
        "rejected": rejected,
        "written": {
            "benchpres_unverified.jsonl": f"{len(rows)} rows with model-proposed labels (unverified)",
            "labels.csv": f"{len(sheet)} attribute rows to review (fill final_label: apply|suppress)",
            "contexts.jsonl": f"{len(contexts)} formal contexts",
        },
        "judges": config.n_judges,
        "contexts_dropped_judges_disagree": disagreed,
        "proposed_labels": {"apply": proposed.get("apply", 0), "suppress": proposed.get("suppress", 0)},
        "usage": usage,
    }
    write_json(out / "summary.json", summary)
    return summary


def write_labels_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


LabelChoice = Literal["apply", "suppress"]


def import_labels(out: Path, csv_path: Path | None = None, *, partial: bool = False) -> dict[str, Any]:
    """Read the reviewed CSV and write ``benchpres.jsonl`` with the final labels.

    Every row's ``final_label`` must be ``apply`` or ``suppress`` (case-insensitive); a bad
    value is a `DataError` naming the file, row and field. A (profile, context) with any row
    unlabelled is an error too, unless `partial`, which writes only fully labelled contexts.
    """
    source = csv_path or out / "labels.csv"
    if not source.exists():
        raise DataError(str(source), None, None, "no such file")
    with source.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [f for f in ("row_id", "index", "final_label") if f not in (reader.fieldnames or [])]
        if missing:
            raise DataError(str(source), None, missing[0], "column missing from the header")
        finals: dict[str, dict[int, bool | None]] = {}
        for number, row in enumerate(reader):
            value = (row.get("final_label") or "").strip().lower()
            if value and value not in LABEL_WORDS:
                raise DataError(str(source), number, "final_label", f"{value!r} is not 'apply' or 'suppress'")
            try:
                index = int(row["index"])
            except (TypeError, ValueError):
                raise DataError(
                    str(source), number, "index", f"{row.get('index')!r} is not an integer"
                ) from None
            finals.setdefault(row["row_id"], {})[index] = LABEL_WORDS[value] if value else None
    unverified = _unverified_rows(out)
    rows, skipped = [], []
    for row_id, labels in finals.items():
        if row_id not in unverified:
            raise DataError(str(source), None, "row_id", f"{row_id!r} is not a row of {out}")
        base = unverified[row_id]
        n = len(base["preference_attribute"])
        if sorted(labels) != list(range(n)):
            raise DataError(
                str(source), None, "index", f"{row_id}: indices {sorted(labels)}, expected 0..{n - 1}"
            )
        if any(v is None for v in labels.values()):
            if partial:
                skipped.append(row_id)
                continue
            raise DataError(
                str(source), None, "final_label", f"{row_id}: some preferences have no final label"
            )
        rows.append({**base, "preference_label": [labels[i] for i in range(n)]})
    for row in rows:
        BenchpresRow.model_validate(row)
    write_jsonl(out / "benchpres.jsonl", rows)
    counts = Counter(v for r in rows for v in r["preference_label"])
    return {
        "rows": len(rows),
        "skipped": skipped,
        "apply": counts.get(True, 0),
        "suppress": counts.get(False, 0),
    }


def _unverified_rows(out: Path) -> dict[str, dict[str, Any]]:
    """The written rows, by row id (``<profile unit>/<context index>``)."""
    path, ids_path = out / "benchpres_unverified.jsonl", out / "row_ids.json"
    if not path.exists() or not ids_path.exists():
        raise DataError(str(path), None, None, "no such file (run `personalign synth benchpres` first)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    ids = json.loads(ids_path.read_text(encoding="utf-8"))
    if len(ids) != len(rows):
        raise DataError(str(ids_path), None, None, f"{len(ids)} ids for {len(rows)} rows")
    return dict(zip(ids, rows, strict=True))

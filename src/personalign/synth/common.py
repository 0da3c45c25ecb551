"""Machinery shared by the synthesis pipelines: recorded model calls, per-unit state files,
the output manifest and small pure helpers.

Every pipeline works in *units* (a CUPID persona, a HiCUPID user, a BenchPreS profile). A unit's
state file holds the outputs of its finished stages and the record of every call; a re-run
skips finished stages, so an interrupted synthesis resumes without repeating any call, and the
call cache answers whatever a killed stage had already asked.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from personalign.data.files import read_records
from personalign.errors import ConfigError, DataError, ParseError
from personalign.fixtures import fixture_path
from personalign.judges.parsing import extract_json
from personalign.llm.types import GenerateConfig
from personalign.runs.manifest import identity_diff, now
from personalign.runs.records import StepRecord
from personalign.runs.steps import StepRunner
from personalign.runs.store import write_json

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

UnitStatus = Literal["pending", "ok", "error"]
MANIFEST = "synth_manifest.json"


def json_config(
    schema_name: str, schema: dict[str, Any], *, temperature: float, max_tokens: int
) -> GenerateConfig:
    """A schema-constrained generation config (SmolLM2 only parses reliably this way)."""
    return GenerateConfig(
        temperature=temperature,
        max_tokens=max_tokens,
        json_schema=schema,
        schema_name=schema_name,
        sample_index=ATTEMPT.get(),
    )


def scale_lengths(schema: Any, scale: float | None) -> Any:
    """A copy of `schema` with every string ``maxLength`` multiplied by `scale`, or removed
    when `scale` is None. Long length bounds make llama.cpp grammars slow (and very long ones
    crash its server), while hosted APIs mostly ignore them; the parsers still check lengths."""
    if isinstance(schema, list):
        return [scale_lengths(item, scale) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "maxLength":
            if scale is not None:
                out[key] = max(20, int(value * scale))
            continue
        out[key] = scale_lengths(value, scale)
    return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "(root)"
    return f"{where}: {err['msg']}"


def parse_model(model_type: type[M], what: str) -> Callable[[str], M]:
    """A strict parser: JSON text -> validated pydantic model, or `ParseError` naming the field."""

    def parse(text: str) -> M:
        value = extract_json(text)
        try:
            return model_type.model_validate(value)
        except ValidationError as exc:
            raise ParseError(f"{what}: {_first_error(exc)}") from None

    return parse


# --- model outputs --------------------------------------------------------------------------


def text_schema(max_length: int, min_length: int = 1) -> dict[str, Any]:
    """A JSON-schema string with length bounds (see `scale_lengths`)."""
    return {"type": "string", "minLength": min_length, "maxLength": max_length}


class ModelOutput(BaseModel):
    """A generator's JSON answer: unknown keys are ignored, lengths are checked by the fields."""

    model_config = ConfigDict(extra="ignore")


class StrippedOutput(ModelOutput):
    """As `ModelOutput`, with runs of white space in every string folded to one space."""

    @field_validator("*", mode="after")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return " ".join(value.split()) if isinstance(value, str) else value


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "x"


# --- per-unit state -------------------------------------------------------------------------


class UnitState(BaseModel):
    """What is known about one unit: finished stages' outputs and every call's record."""

    unit_id: str
    status: UnitStatus = "pending"
    attempt: int = Field(0, description="bumped when a failed unit is re-sampled (--resample-failed)")
    failed_stage: str | None = None
    error: str | None = None
    inputs: dict[str, Any] = Field(default_factory=dict)
    stages: dict[str, Any] = Field(default_factory=dict, description="stage name -> output")
    steps: dict[str, StepRecord] = Field(default_factory=dict)


# The current unit's attempt number (every call's `sample_index`) and whether failed units are
# re-sampled; context variables, so each unit's task (and its sub-tasks) sees its own value.
ATTEMPT: ContextVar[int] = ContextVar("synth_attempt", default=0)
RESAMPLE: ContextVar[bool] = ContextVar("synth_resample", default=False)


def begin(state: UnitState) -> None:
    """Mark a unit pending again. With re-sampling on, a failed unit gets a new attempt number,
    which becomes the `sample_index` of its calls: a cached unparseable answer is then asked
    anew instead of replayed (finished stages are still reused, not re-asked)."""
    if state.status == "error" and RESAMPLE.get():
        state.attempt += 1
    state.status, state.failed_stage, state.error = "pending", None, None
    ATTEMPT.set(state.attempt)


class StateStore:
    """One JSON file per unit under ``<out>/state/``, written atomically after every stage."""

    def __init__(self, root: Path) -> None:
        self.root = root / "state"

    def path(self, unit_id: str) -> Path:
        return self.root / f"{slug(unit_id)}.json"

    def load(self, unit_id: str) -> UnitState | None:
        path = self.path(unit_id)
        if not path.exists():
            return None
        try:
            return UnitState.model_validate_json(path.read_text(encoding="utf-8"))
        except ValidationError as exc:
            raise ConfigError(f"{path}: not a valid synthesis state file ({_first_error(exc)})") from None

    def save(self, state: UnitState) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_json(self.path(state.unit_id), state.model_dump(mode="json"))


class Stage:
    """Run one named stage of a unit, or reuse its stored output; saves the state after it."""

    def __init__(self, state: UnitState, store: StateStore) -> None:
        self.state = state
        self.store = store
        # Synthesis parses what came back, as before, and flags a cut-off reply ("truncated") in
        # the step record instead of failing the unit: the budgets are the user's, and a verifier
        # stage that rejects defective units is the synthesis issue's work (docs/synthesis.md).
        self.steps = StepRunner(state.steps, truncation="score")

    def done(self, name: str) -> bool:
        return name in self.state.stages

    def output(self, name: str) -> Any:
        return self.state.stages[name]

    def finish(self, name: str, output: Any) -> Any:
        self.state.stages[name] = output
        self.state.steps.update(self.steps.steps)
        self.store.save(self.state)
        return output

    def fail(self, name: str, error: str) -> None:
        self.state.status = "error"
        self.state.failed_stage = name
        self.state.error = error
        self.state.steps.update(self.steps.steps)
        self.store.save(self.state)


# --- output manifest ------------------------------------------------------------------------


def open_output(out: Path, identity: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """Create the output directory, or check that an existing one was made with the same
    identity (pipeline, models, prompts, seed, sizes other than the unit count). Returns True
    when resuming."""
    path = out / MANIFEST
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("identity") != identity:
            diffs = identity_diff(old.get("identity", {}), identity)
            raise ConfigError(
                f"{out} holds a synthesis with another configuration ({'; '.join(diffs[:5])}); "
                "pick another output directory"
            )
        write_json(
            path, {**old, **manifest, "identity": identity, "created": old.get("created"), "updated": now()}
        )
        return True
    out.mkdir(parents=True, exist_ok=True)
    write_json(path, {**manifest, "identity": identity, "created": now()})
    return False


def balanced_pick(
    options: Sequence[str], counts: Mapping[str, int], rng: Any, k: int = 1, exclude: set[str] | None = None
) -> list[str]:
    """Pick `k` distinct options, always among the least used so far (ties broken by `rng`)."""
    chosen: list[str] = []
    banned = set(exclude or ())
    for _ in range(k):
        pool = [o for o in options if o not in banned and o not in chosen]
        if not pool:
            raise ValueError(f"not enough options to pick {k} from {list(options)}")
        low = min(counts.get(o, 0) for o in pool)
        choice = rng.choice([o for o in pool if counts.get(o, 0) == low])
        chosen.append(choice)
    return chosen


async def run_units(
    units: Sequence[Any],
    work: Callable[[Any], Any],
    *,
    concurrency: int,
    on_done: Callable[[UnitState], None] | None = None,
) -> list[UnitState]:
    """Run `work` over the units, `concurrency` at a time; on interruption, cancel the rest
    (finished units and stages are already on disk) and re-raise."""
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(unit: Any) -> UnitState:
        async with semaphore:
            state: UnitState = await work(unit)
            if on_done is not None:
                on_done(state)
            return state

    tasks = [asyncio.ensure_future(one(u)) for u in units]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write rows as JSON lines atomically (a temp file, then rename)."""
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)


class PersonaSeed(BaseModel):
    model_config = ConfigDict(extra="ignore")
    occupation: str = Field(min_length=1)
    description: str = Field(min_length=1)


def load_seeds(path: str | None) -> list[PersonaSeed]:
    """Seed descriptions: the bundled ones, or a .jsonl/.json/.parquet file with
    ``occupation`` and ``description`` per row."""
    source = fixture_path("persona_seeds.jsonl") if path is None else Path(path)
    if not source.exists():
        raise DataError(str(source), None, None, "no such file")
    seeds = []
    for record in read_records(source):
        try:
            seeds.append(PersonaSeed.model_validate(record.data))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise DataError(record.source, record.row, str(err["loc"][0]), err["msg"]) from None
    if not seeds:
        raise DataError(str(source), None, None, "no seed descriptions")
    return seeds


def check_seed_reuse(
    n_units: int, seeds: Sequence[PersonaSeed], path: str | None, allow: bool, what: str
) -> None:
    """Refuse more units than seed descriptions unless reuse is allowed: units that share a seed
    get near-identical data (identical at temperature 0), which inflates a benchmark."""
    if n_units > len(seeds) and not allow:
        source = path or "the bundled seeds"
        raise ConfigError(
            f"{n_units} {what} need more than the {len(seeds)} seed descriptions of {source}, so some "
            "seeds would serve several units (near-identical data); pass a larger --seeds file or "
            "--allow-seed-reuse"
        )


STOPWORDS = frozenset(
    """the and for that with this from your you are all any must should when each every into
    about their them they have has had not but can will would than then also only more most
    very such its it's our out use using used make makes made being been were was what which
    who whom how why where there here over under per via well just like one two three""".split()  # noqa: SIM905
)


def _stem(word: str) -> str:
    return word[:6]


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in words(text) if len(w) >= 3 and w not in STOPWORDS}


def lexical_leak(request: str, preference: str) -> float:
    """Share of the preference's content words (crudely stemmed) that the request contains."""
    pref = content_words(preference)
    if not pref:
        return 0.0
    return round(len(pref & content_words(request)) / len(pref), 4)


# --- usage over every invocation --------------------------------------------------------------

USAGE_LOG = "usage_log.json"
_SUMMED = ("calls", "cache_hits", "errors", "tokens", "reasoning_tokens", "cost_usd")


def sum_usage(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The field-by-field sum of usage records (`UsageTracker.to_record` shape), per model too."""
    total: dict[str, Any] = {k: 0 for k in _SUMMED}
    per_model: dict[str, dict[str, Any]] = {}
    for record in records:
        for key in _SUMMED:
            total[key] += record.get(key, 0) or 0
        for model, tally in (record.get("per_model") or {}).items():
            into = per_model.setdefault(model, {})
            for key, value in tally.items():
                if isinstance(value, int | float):
                    into[key] = into.get(key, 0) + value
    total["cost_usd"] = round(float(total["cost_usd"]), 6)
    total["per_model"] = {k: per_model[k] for k in sorted(per_model)}
    return total


def record_invocation(out: Path, usage: Mapping[str, Any], status: str) -> dict[str, Any]:
    """Append this invocation's usage to ``<out>/usage_log.json`` and return the usage of the
    whole synthesis: every invocation summed (a resume adds to it, never overwrites it), with
    this invocation's own record under ``this_invocation``."""
    path = out / USAGE_LOG
    log: list[dict[str, Any]] = []
    if path.exists():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc.msg})") from None
        if not isinstance(loaded, list):
            raise ConfigError(f"{path}: expected a list of invocation records")
        log = loaded
    log.append({"finished": now(), "status": status, "usage": dict(usage)})
    out.mkdir(parents=True, exist_ok=True)
    write_json(path, log)
    return {
        **sum_usage([entry["usage"] for entry in log]),
        "max_cost_usd": usage.get("max_cost_usd"),
        "invocations": len(log),
        "this_invocation": dict(usage),
    }


def run_recorded(out: Path, tracker: Any, work: Callable[[], T]) -> tuple[T, dict[str, Any]]:
    """Run `work` and record its usage in the log, also when it is interrupted (then re-raise);
    returns the result and the usage summed over every invocation."""
    try:
        result = work()
    except BaseException:
        record_invocation(out, tracker.to_record(), "interrupted")
        raise
    return result, record_invocation(out, tracker.to_record(), "complete")

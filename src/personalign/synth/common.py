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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from personalign.data.files import read_records
from personalign.errors import ConfigError, DataError, ParseError
from personalign.fixtures import fixture_path
from personalign.judges.parsing import extract_json
from personalign.llm.spec import parse_model_spec
from personalign.llm.types import GenerateConfig
from personalign.prompts import load_template
from personalign.runs.manifest import environment, identity_diff, identity_hash, now
from personalign.runs.records import StepRecord
from personalign.runs.steps import StepRunner
from personalign.runs.store import write_json

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

UnitStatus = Literal["pending", "ok", "error"]
MANIFEST = "synth_manifest.json"


def attempt_seed(seed: int | None) -> int | None:
    """The sampling seed of the current unit's calls: `seed` on the first attempt, another one
    per re-sampled attempt. A backend that honours seeds (llama.cpp does) would otherwise give a
    re-sampled call the very reply that failed, so `--resample-failed` could never succeed."""
    attempt = ATTEMPT.get()
    if seed is None or attempt == 0:
        return seed
    return (seed + attempt * 1_000_003) % 2**31


def json_config(
    schema_name: str,
    schema: dict[str, Any],
    *,
    temperature: float,
    max_tokens: int,
    seed: int | None = None,
) -> GenerateConfig:
    """A schema-constrained generation config (SmolLM2 only parses reliably this way); `seed` is
    varied per re-sampled attempt (`attempt_seed`)."""
    return GenerateConfig(
        temperature=temperature,
        max_tokens=max_tokens,
        json_schema=schema,
        schema_name=schema_name,
        seed=attempt_seed(seed),
        sample_index=ATTEMPT.get(),
    )


# Bounds up to this many characters stay in a schema even without a length scale: a short bound
# is cheap for llama.cpp's grammar and keeps a small model from writing a paragraph where a name
# goes (SmolLM2 wrote the persona's whole description as a factor name, failing the parser's check).
SHORT_BOUND = 100


def scale_lengths(schema: Any, scale: float | None) -> Any:
    """A copy of `schema` with every string ``maxLength`` multiplied by `scale`, or, when `scale` is
    None, removed unless short (<= `SHORT_BOUND`). Long length bounds make llama.cpp grammars slow
    (and very long ones crash its server), while hosted APIs mostly ignore them; the parsers still
    check lengths."""
    if isinstance(schema, list):
        return [scale_lengths(item, scale) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "maxLength":
            if scale is not None:
                out[key] = max(20, int(value * scale))
            elif value <= SHORT_BOUND:
                out[key] = value
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


def object_schema(properties: dict[str, Any]) -> dict[str, Any]:
    """A JSON-schema object requiring every one of `properties`."""
    return {"type": "object", "properties": properties, "required": list(properties)}


def fixed_list_schema(key: str, item: dict[str, Any], n: int) -> dict[str, Any]:
    """An object holding exactly `n` items of schema `item` under `key` (the fixed-length lists the
    pipelines ask for: contexts, labels, dialogue turns, entities)."""
    return object_schema({key: {"type": "array", "items": item, "minItems": n, "maxItems": n}})


def parse_fixed_list(
    model_type: type[BaseModel],
    key: str,
    n: int,
    what: str,
    noun: str = "items",
    check: Callable[[list[Any]], None] | None = None,
) -> Callable[[str], list[Any]]:
    """A strict parser of `model_type` whose list field `key` must hold exactly `n` items (ParseError
    naming `what` otherwise); `check` may refuse the list further. Items come back as plain values."""
    base = parse_model(model_type, what)

    def parse(text: str) -> list[Any]:
        items = list(getattr(base(text), key))
        if len(items) != n:
            raise ParseError(f"{what}: {len(items)} {noun}, expected {n}")
        if check is not None:
            check(items)
        return [item.model_dump() if isinstance(item, BaseModel) else item for item in items]

    return parse


class ModelOutput(BaseModel):
    """A generator's JSON answer: unknown keys are ignored, lengths are checked by the fields."""

    model_config = ConfigDict(extra="ignore")


class StrippedOutput(ModelOutput):
    """As `ModelOutput`, with runs of white space in every string folded to one space."""

    @field_validator("*", mode="after")
    @classmethod
    def _strip(cls, value: Any) -> Any:
        return " ".join(value.split()) if isinstance(value, str) else value


def text_output(name: str, bounds: Mapping[str, int], **extra: Any) -> type[StrippedOutput]:
    """A `StrippedOutput` model with one non-empty string field per name of `bounds` (its maximum
    length), plus `extra` fields given as pydantic ``(type, Field(...))`` pairs."""
    fields: dict[str, Any] = {k: (str, Field(min_length=1, max_length=n)) for k, n in bounds.items()}
    model: type[StrippedOutput] = create_model(name, __base__=StrippedOutput, **extra, **fields)
    return model


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "x"


# --- settings every pipeline shares ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SynthSettings:
    """The settings every pipeline's config shares (keyword-only, after the pipeline's own fields):
    the sampling seed, the seed descriptions, the schemas' length scale and the re-asks per call."""

    seed: int = 0
    seeds_file: str | None = None
    allow_seed_reuse: bool = False
    length_scale: float | None = None
    reasks: int = 1

    def __post_init__(self) -> None:
        if self.length_scale is not None and self.length_scale <= 0:
            raise ConfigError("length_scale must be positive (or None to drop string length bounds)")
        if self.reasks < 0:
            raise ConfigError("reasks must be >= 0")

    def identity_record(
        self,
        pipeline: str,
        unit_count: str,
        models: Mapping[str, str | None],
        templates: Sequence[str],
        *,
        nested: bool,
    ) -> dict[str, Any]:
        """What defines the data: every setting but the unit count (it may grow) and the seed-reuse
        permission, each role's model label (role -> label, under ``models`` when `nested`, else in
        place of the role fields, as each pipeline has always recorded it), and the prompts' hashes."""
        record = asdict(self)
        for name in (unit_count, "allow_seed_reuse"):
            record.pop(name)
        labels = {role: parse_model_spec(spec).label for role, spec in models.items() if spec is not None}
        if nested:
            for role in models:
                record.pop(role)
            record["models"] = labels
        else:
            record.update(labels)
        record["prompts"] = {name: load_template(name).sha256 for name in templates}
        return {"pipeline": pipeline, **record}


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


def resume_unit(store: StateStore, unit_id: str, inputs: dict[str, Any] | None = None) -> Stage:
    """The stage runner of one unit: its state loaded, or new with `inputs`; an unfinished unit is
    begun again (`begin`), a finished one is left as it is (``stage.state.status == "ok"``)."""
    state = store.load(unit_id) or UnitState(unit_id=unit_id, inputs=inputs or {})
    if state.status != "ok":
        begin(state)
    return Stage(state, store)


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

    @property
    def finished(self) -> bool:
        """Whether the whole unit finished in an earlier run (nothing left to do)."""
        return self.state.status == "ok"

    def done(self, name: str) -> bool:
        return name in self.state.stages

    def output(self, name: str) -> Any:
        return self.state.stages[name]

    def finish(self, name: str, output: Any) -> Any:
        self.state.stages[name] = output
        self.state.steps.update(self.steps.steps)
        self.store.save(self.state)
        return output

    def fail(self, name: str, error: str) -> UnitState:
        """Mark the unit failed at `name` with `error`, save it and return its state."""
        self.state.status = "error"
        self.state.failed_stage = name
        self.state.error = error
        self.state.steps.update(self.steps.steps)
        self.store.save(self.state)
        return self.state

    def fail_output(self, current: str, exc: Exception) -> UnitState:
        """The unit failed at stage `current` on an output its checks refused (ValueError, ParseError)."""
        return self.fail(current, f"{current}: {exc}")

    def complete(self) -> UnitState:
        """Mark the unit finished, save it and return its state."""
        self.state.status = "ok"
        self.store.save(self.state)
        return self.state


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


@dataclass
class SynthResult:
    """What a pipeline returns: its output directory, the summary it wrote and every unit's state."""

    out: Path
    summary: dict[str, Any]
    states: list[UnitState]


def start_output(
    out: Path, pipeline: str, identity: dict[str, Any], config: Any, models: dict[str, Any], **extra: Any
) -> bool:
    """Write (or check, when resuming) the output manifest of a `pipeline` run with this frozen
    dataclass `config`, the record of each role's model and any `extra` entries; True when resuming."""
    manifest = {
        "pipeline": pipeline,
        "identity_hash": identity_hash(identity),
        "config": asdict(config),
        "models": models,
        "environment": environment(),
        **extra,
    }
    return open_output(out, identity, manifest)


def unit_seeds(path: str | None, n_units: int, allow_reuse: bool, what: str) -> list[PersonaSeed]:
    """The seed descriptions for `n_units` units (bundled or `path`), refused when too few unless
    reuse is allowed (`check_seed_reuse`)."""
    seeds = load_seeds(path)
    check_seed_reuse(n_units, seeds, path, allow_reuse, what)
    return seeds


class PoolOptions(TypedDict, total=False):
    """How a pipeline's units are run (every `synthesize_*` takes these as keyword arguments)."""

    concurrency: int  # units at once (each pipeline has its own default)
    resample_failed: bool  # re-ask a failed unit's remaining calls as new samples
    on_done: Callable[[UnitState], None] | None  # called as each unit finishes (progress bars)


def pool_units(
    units: Sequence[Any], work: Callable[[Any], Any], pool: PoolOptions, concurrency: int
) -> Awaitable[list[UnitState]]:
    """`run_units` with the pool's concurrency (else `concurrency`) and its `on_done`."""
    return run_units(
        units, work, concurrency=pool.get("concurrency", concurrency), on_done=pool.get("on_done")
    )


def run_pool(
    out: Path, factory: Any, make_states: Callable[[], Awaitable[list[UnitState]]], pool: PoolOptions
) -> tuple[list[UnitState], dict[str, Any]]:
    """Run a pipeline's units (`make_states`, usually `pool_units`) on one event loop with the pool's
    re-sampling set, close the factory's clients, and record the usage; returns the states and the
    usage summed over every invocation."""

    async def main() -> list[UnitState]:
        RESAMPLE.set(pool.get("resample_failed", False))
        try:
            return await make_states()
        finally:
            await factory.aclose()

    return run_recorded(out, factory.tracker, lambda: asyncio.run(main()))


def split_failed(
    states: Sequence[UnitState],
) -> tuple[list[UnitState], list[dict[str, Any]], dict[str, Any]]:
    """The finished units, the failures (`{id, stage, error}`) and the validation report's failure
    entries (an empty entry for each finished unit, for the caller to fill), in unit order: every
    pipeline's summary starts from these."""
    finished: list[UnitState] = []
    failed: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    for state in states:
        if state.status == "ok":
            finished.append(state)
            report[state.unit_id] = {}  # the caller's verdict; the key keeps the report in unit order
            continue
        failed.append({"id": state.unit_id, "stage": state.failed_stage, "error": state.error})
        report[state.unit_id] = {"status": "failed", "stage": state.failed_stage, "error": state.error}
    return finished, failed, report


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


# PersonaHub (Ge et al., 2024), the persona source of the official CUPID pipeline: its "instruction"
# subset holds one persona description per row under this column.
PERSONAHUB_REPO = "proj-persona/PersonaHub"
PERSONAHUB_CONFIG = "instruction"
PERSONAHUB_COLUMN = "input persona"
PERSONAHUB = "personahub"  # `--seeds personahub[:<subset>]`


def load_seeds(path: str | None) -> list[PersonaSeed]:
    """Seed descriptions: the bundled ones; ``personahub[:<subset>]`` (PersonaHub from the datasets hub,
    online only); or a .jsonl/.json/.parquet file with ``occupation`` and ``description`` per row, or
    with PersonaHub's own ``input persona`` column (a local copy of PersonaHub)."""
    if path is not None and path.partition(":")[0] == PERSONAHUB and not Path(path).exists():
        subset = path.partition(":")[2] or PERSONAHUB_CONFIG
        return personahub_seeds(_hub_personas(subset), f"{PERSONAHUB_REPO} ({subset})")
    source = fixture_path("persona_seeds.jsonl") if path is None else Path(path)
    if not source.exists():
        raise DataError(str(source), None, None, "no such file")
    records = list(read_records(source))
    if records and PERSONAHUB_COLUMN in records[0].data and "description" not in records[0].data:
        rows = []
        for record in records:
            text = record.data.get(PERSONAHUB_COLUMN)
            if not isinstance(text, str) or not text.strip():
                raise DataError(record.source, record.row, PERSONAHUB_COLUMN, "missing or empty persona")
            rows.append(text)
        return personahub_seeds(rows, str(source))
    seeds = []
    for record in records:
        try:
            seeds.append(PersonaSeed.model_validate(record.data))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise DataError(record.source, record.row, str(err["loc"][0]), err["msg"]) from None
    if not seeds:
        raise DataError(str(source), None, None, "no seed descriptions")
    return seeds


def seed_occupations() -> list[str]:
    """The occupations PersonaHub personas are matched against: those of the bundled seeds (ours)."""
    seeds = [PersonaSeed.model_validate(r.data) for r in read_records(fixture_path("persona_seeds.jsonl"))]
    return sorted({s.occupation for s in seeds})


def personahub_seeds(personas: Sequence[str], source: str) -> list[PersonaSeed]:
    """PersonaHub descriptions as seeds: each persona that names one of `seed_occupations` (as a whole
    word or phrase; the first in the text wins) gets it as its occupation, the others are left out, as
    the official pipeline keeps only personas with an occupation; repeated descriptions count once."""
    patterns = [
        (occupation, re.compile(r"\b" + re.escape(occupation.replace("_", " ")) + r"s?\b", re.IGNORECASE))
        for occupation in seed_occupations()
    ]
    seeds: list[PersonaSeed] = []
    seen: set[str] = set()
    for text in personas:
        description = " ".join(text.split())
        if not description or description in seen:
            continue
        hits = [
            (m.start(), occupation) for occupation, pattern in patterns if (m := pattern.search(description))
        ]
        if hits:
            seen.add(description)
            seeds.append(PersonaSeed(occupation=min(hits)[1], description=description))
    if not seeds:
        raise DataError(
            source, None, PERSONAHUB_COLUMN, "no persona names an occupation of the bundled seeds"
        )
    return seeds


def _hub_personas(subset: str) -> list[str]:
    """The persona column of PersonaHub's `subset` from the datasets hub; a clear error offline."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "--seeds personahub needs the `datasets` package (pip install datasets); "
            "or pass --seeds FILE, or leave --seeds unset for the bundled seeds"
        ) from None
    try:
        table = datasets.load_dataset(PERSONAHUB_REPO, subset, split="train")
        return [str(text) for text in table[PERSONAHUB_COLUMN]]
    except Exception as exc:  # offline, hub errors, a renamed column: all mean "not available here"
        raise ConfigError(
            f"cannot load {PERSONAHUB_REPO} ({subset}) from the datasets hub ({type(exc).__name__}: "
            f"{str(exc)[:200]}); offline, pass --seeds FILE (a local copy with an {PERSONAHUB_COLUMN!r} "
            "column, or occupation/description rows) or leave --seeds unset for the bundled seeds"
        ) from None


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

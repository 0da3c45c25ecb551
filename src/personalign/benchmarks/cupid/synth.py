"""CUPID-style synthesis: personas, context factors, 13-session journeys, checklists, simulated
dialogues, and the three instance types, written in the official CUPID schema.

Stages per persona (each stored in the persona's state file, so a re-run resumes there):
``persona`` -> ``factors`` -> ``changed`` -> ``session/<i>`` (one per session, in order) ->
``checklists`` -> ``dialogue/<i>`` (concurrently) -> ``instances`` (pure) -> ``leak_check``.
The session plan (which session carries which factor and preference) is built in code from
the seed, so every journey has the paper's structure by construction; the models only write
the content. See docs/synthesis.md.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field, field_validator

from personalign.benchmarks.cupid.build import PersonaJourney, PlannedSession, build_instances
from personalign.benchmarks.cupid.judges import CHECKLIST_ONLY_SCHEMA, format_checklist, parse_checklist
from personalign.benchmarks.cupid.protocol import (
    ASSISTANT_SIMULATOR_YAML,
    FACTORS_GENERATOR_YAML,
    PERSONA_GENERATOR_YAML,
    SESSIONS_GENERATOR_YAML,
    SOURCE,
    USER_SIMULATOR_YAML,
    parse_paper_checklist,
)
from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.benchmarks.cupid.synth_checks import check_persona, lexical_leak, write_outputs
from personalign.benchmarks.cupid.synth_paper import (
    PaperSynthPrompts,
    load_paper_synth_prompts,
    paper_assistant_messages,
    paper_decomposer_messages,
    paper_factors_messages,
    paper_opening,
    paper_persona_messages,
    paper_pins,
    paper_sessions_messages,
    paper_user_messages,
    parse_paper_factors,
    parse_paper_persona,
    parse_paper_sessions,
    parse_paper_user_turn,
)
from personalign.benchmarks.cupid.synth_paper import label as paper_label
from personalign.benchmarks.cupid.synth_verify import (
    CHANGE_SCHEMA,
    NEEDS,
    REQUEST_SCHEMA,
    VERIFY_TEMPLATES,
    ChangeVerdict,
    RequestVerdict,
    instance_reasons,
    items_schema,
    parse_items,
    repairable,
    user_side,
)
from personalign.errors import ConfigError, ParseError
from personalign.llm import ModelFactory
from personalign.llm.model import Model
from personalign.llm.spec import parse_model_spec
from personalign.llm.types import GenerateConfig
from personalign.prompts import load_template
from personalign.runs.steps import StepFailed, gather_steps
from personalign.runs.store import write_json
from personalign.synth import common
from personalign.synth.common import (
    ATTEMPT,
    ModelOutput,
    PersonaSeed,
    Stage,
    StateStore,
    SynthResult,
    SynthSettings,
    UnitState,
    balanced_pick,
    json_config,
    parse_model,
    scale_lengths,
    slug,
    text_schema,
)

if TYPE_CHECKING:  # Python 3.10 has no typing.Unpack
    from typing_extensions import Unpack
from personalign.synth.taxonomy import (
    BIG_FIVE,
    CAREER_LEVELS,
    DECISION_STYLES,
    FACTOR_TYPES,
    PREFERENCE_TYPES,
    SCHWARTZ_VALUES,
    TASK_TYPES,
    TRAIT_LEVELS,
)
from personalign.types import Message

PlanRole = Literal["A", "A_changed", "B", "other"]
ROLES = ("generator", "user_simulator", "assistant", "decomposer", "leak_judge", "verifier")
TEMPLATES = {
    "persona": "synth/cupid_persona",
    "factors": "synth/cupid_factors",
    "changed": "synth/cupid_changed_preference",
    "contrast": "synth/cupid_contrast",
    "session": "synth/cupid_session",
    "assistant": "synth/cupid_assistant",
    "user_turn": "synth/cupid_user_turn",
    "leak_check": "synth/cupid_leak_check",
    # The checklist-only decomposer the synthesis pipeline was tuned on; the evaluation decomposer
    # (cupid/decompose) has an analysis step the 135M model overruns at synthesis budgets.
    "decompose": "synth/cupid_decompose",
    **{f"verify_{k}": v for k, v in VERIFY_TEMPLATES.items()},
}
MIN_SESSIONS = 9
# Repaired dialogues are asked as a new sample (`sample_index` = this + the unit's attempt).
REPAIR_SAMPLE = 100


# Temperature per role: the paper's (the official synthesis modules), but the factors at 0.7, as
# 1.0 breaks small local models' JSON; `--protocol paper` takes the paper's own (PAPER_TEMPERATURES).
TEMPERATURES: dict[str, float] = {
    "persona": 0.7,
    "factors": 0.7,
    "changed": 0.7,
    "session": 0.7,
    "user_simulator": 0.3,
    "assistant": 0.7,
    "decomposer": 0.0,
    "leak_judge": 0.0,
    "verifier": 0.0,
}
# The paper's recipe: one strong generator for persona (0.7), factors (1.0), sessions (0.7), user
# simulator (0.3) and decomposer (0); a weaker assistant simulator (0.7).
PAPER_TEMPERATURES: dict[str, float] = {**TEMPERATURES, "factors": 1.0}

# The official modules' budgets (`--protocol paper`; "sessions": the whole journey in one call).
PAPER_MAX_TOKENS: dict[str, int] = {
    "persona": 4096,
    "factors": 8192,
    "sessions": 8192,
    "decomposer": 4096,
    "user_simulator": 8192,
    "assistant": 2048,
}

# Token budget per role (the paper's sizes; a run may pass its own).
MAX_TOKENS: dict[str, int] = {
    "persona": 700,
    "factors": 4096,
    "changed": 300,
    "session": 1200,
    "user_simulator": 600,
    "assistant": 600,
    "decomposer": 400,
    "leak_judge": 300,
    "verifier": 300,
}


# --- configuration --------------------------------------------------------------------------


_T = TypeVar("_T")


@dataclass(frozen=True)
class CupidSynthConfig(SynthSettings):
    """Everything that shapes the generated data (recorded in the output manifest).

    ``n_personas`` may grow between runs into the same directory: persona templates are
    drawn one after another, so the first k are the same for any pool size.
    """

    generator: str
    user_simulator: str
    assistant: str
    decomposer: str
    leak_judge: str | None = None
    verifier: str | None = None
    n_personas: int = 4
    n_factors: int = 8
    n_sessions: int = 13
    max_turns: int = 16
    leak_threshold: float = 0.6
    # "paper": the official decomposer and simulator prompts, read at run time (synth_paper.py)
    protocol: Literal["personalign", "paper"] = "personalign"
    temperature: dict[str, float] = field(default_factory=lambda: dict(TEMPERATURES))
    max_tokens: dict[str, int] = field(default_factory=lambda: dict(MAX_TOKENS))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_personas < 1:
            raise ConfigError("n_personas must be at least 1")
        if self.protocol not in ("personalign", "paper"):
            raise ConfigError(f"unknown synthesis protocol {self.protocol!r} (paper | personalign)")
        if self.n_sessions < MIN_SESSIONS:
            raise ConfigError(
                f"n_sessions must be at least {MIN_SESSIONS} (2 A, 2 A', the final A', 2 B and "
                "at least 2 other sessions, two of which each instance type drops)"
            )
        if self.n_factors < 3:
            raise ConfigError("n_factors must be at least 3 (the contrastive pair plus one other)")
        if self.max_turns < 0:
            raise ConfigError("max_turns must be >= 0")
        if not 0 < self.leak_threshold <= 1:
            raise ConfigError("leak_threshold must be in (0, 1]")

    @property
    def n_prior(self) -> int:
        """Prior sessions per instance: 8 for the paper's 13-session journeys."""
        return self.n_sessions - 5

    def model_for(self, role: str) -> str | None:
        return getattr(self, role)  # type: ignore[no-any-return]

    def identity(self) -> dict[str, Any]:
        models = {r: self.model_for(r) for r in ROLES}
        record = self.identity_record("cupid", "n_personas", models, list(TEMPLATES.values()), nested=True)
        if self.protocol == "paper":  # the official texts, by their pinned hashes
            record["upstream"] = {"repo": SOURCE.repo, "commit": SOURCE.commit, "files": paper_pins()}
        else:  # as before the protocol existed, so earlier output directories still resume
            record.pop("protocol")
        return record


# --- persona templates (pure) ---------------------------------------------------------------


def persona_templates(seeds: Sequence[PersonaSeed], n: int, seed: int) -> list[dict[str, Any]]:
    """Draw `n` persona templates, balancing every attribute by least-used sampling.

    Template k depends only on the seed and templates 0..k-1, so pools of different sizes
    share their prefix (a synthesis can be extended).
    """
    rng = random.Random(f"cupid-templates:{seed}")
    by_occupation: dict[str, list[PersonaSeed]] = {}
    for s in seeds:
        by_occupation.setdefault(s.occupation, []).append(s)
    occupations = sorted(by_occupation)
    counts: Counter[str] = Counter()
    templates = []
    for k in range(n):
        occupation = balanced_pick(occupations, counts, rng)[0]
        counts[occupation] += 1
        # the least used seed of that occupation, so no seed serves twice while others are unused
        rows = by_occupation[occupation]
        keys = [f"seed:{occupation}:{i}" for i in range(len(rows))]
        key = balanced_pick(keys, counts, rng)[0]
        counts[key] += 1
        seed_row = rows[keys.index(key)]
        career = balanced_pick(CAREER_LEVELS, counts, rng)[0]
        trait_names = balanced_pick(BIG_FIVE, counts, rng, k=2)
        traits = []
        for name in trait_names:
            level = balanced_pick([f"{name} ({lv})" for lv in TRAIT_LEVELS], counts, rng)[0]
            traits.append(level)
        values = balanced_pick(SCHWARTZ_VALUES, counts, rng, k=2)
        style = balanced_pick(DECISION_STYLES, counts, rng)[0]
        for item in (career, *trait_names, *traits, *values, style):
            counts[item] += 1
        templates.append(
            {
                "id": k,
                "seed": seed_row.description,
                "occupation": occupation,
                "career_level": career,
                "personality_traits": traits,
                "personal_values": values,
                "decision_making_styles": style,
            }
        )
    return templates


def default_assistant(generator: str, assistant: str | None) -> str:
    """The assistant simulator's spec: the given one (``generator`` means the generator's), the
    generator for scripted and local models, else none: the paper's assistant simulator was a
    deliberately weaker model than the generator, so that dialogues need feedback turns."""
    if assistant == "generator":
        return generator
    if assistant:
        return assistant
    if parse_model_spec(generator).provider in ("scripted", "local"):
        return generator
    raise ConfigError(
        "set --assistant: the paper simulated the assistant with a weaker model than the generator "
        "(an 8B open model against a frontier generator) so that its replies miss preferences and the "
        "user gives feedback; pass such a model, or `--assistant generator` to use the generator"
    )


def persona_id(template: dict[str, Any]) -> str:
    return f"{template['id']}+{slug(template['occupation'])}"


# --- model outputs --------------------------------------------------------------------------


class PersonaOut(ModelOutput):
    name: str = Field(min_length=1, max_length=80)
    description: str = Field(min_length=20, max_length=1500)


PERSONA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": text_schema(60), "description": text_schema(600, 20)},
    "required": ["name", "description"],
}

FactorType = Literal[FACTOR_TYPES]  # type: ignore[valid-type]
PreferenceType = Literal[PREFERENCE_TYPES]  # type: ignore[valid-type]
TaskType = Literal[TASK_TYPES]  # type: ignore[valid-type]


# A preference is one sentence (our prompts ask for one): at least this many distinct words.
MIN_PREFERENCE_WORDS = 3


def a_sentence(value: str) -> str:
    """A preference stated in words: SmolLM2 wrote "Businesses, Businesses" or "Fantasy_101_123_456"
    as preferences, and a copied-down A' can never differ from such a one (re-sampling keeps the
    finished factors), so it is refused where it is written."""
    found = {w for w in re.findall(r"[^\W\d_]{2,}", value.lower())}
    if len(found) < MIN_PREFERENCE_WORDS:
        raise ValueError(
            f"a preference must be a sentence of at least {MIN_PREFERENCE_WORDS} different words"
        )
    return value


# The schema of a written preference: a sentence of 3-23 words (at most 15 characters each, so
# at most about 390 characters), the form `a_sentence` checks. A grammar-constrained small model
# then writes words (SmolLM2 wrote "Practicality," or "Fantasy_101_123_456_789" without it); a
# pattern takes the place of length bounds in llama.cpp's grammar, so it bounds the length itself.
_WORD = "[A-Za-z][A-Za-z0-9'/()-]{0,13}[,;:]?"
PREFERENCE_TEXT: dict[str, Any] = {"type": "string", "pattern": f"^{_WORD}( {_WORD}){{2,22}}[.!]?$"}


class FactorBody(ModelOutput):
    background: str = Field(min_length=1, max_length=800)
    factor: str = Field(min_length=2, max_length=100)
    task_types: list[TaskType] = Field(min_length=1, max_length=4)
    preference_type: PreferenceType
    preference: str = Field(min_length=10, max_length=400)

    @field_validator("factor", "preference", "background")
    @classmethod
    def _strip(cls, value: str) -> str:
        return " ".join(value.split())

    @field_validator("preference")
    @classmethod
    def _sentence(cls, value: str) -> str:
        return a_sentence(value)


class FactorOut(FactorBody):
    factor_type: FactorType


class PairOut(ModelOutput):
    factor_type: FactorType
    first: FactorBody
    second: FactorBody


class FactorsOut(ModelOutput):
    factors: list[FactorOut]
    contrastive_pair: PairOut


def _factor_body_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "background": text_schema(400),
            "factor": text_schema(60, 2),
            "task_types": {
                "type": "array",
                "items": {"type": "string", "enum": list(TASK_TYPES)},
                "minItems": 1,
                "maxItems": 3,
            },
            "preference_type": {"type": "string", "enum": list(PREFERENCE_TYPES)},
            "preference": PREFERENCE_TEXT,
        },
        "required": ["background", "factor", "task_types", "preference_type", "preference"],
    }


def factors_schema(n_regular: int) -> dict[str, Any]:
    body = _factor_body_schema()
    regular = {
        **body,
        "properties": {
            "background": body["properties"]["background"],
            "factor_type": {"type": "string", "enum": list(FACTOR_TYPES)},
            **{k: v for k, v in body["properties"].items() if k != "background"},
        },
        "required": ["background", "factor_type", *body["required"][1:]],
    }
    return {
        "type": "object",
        "properties": {
            "factors": {"type": "array", "items": regular, "minItems": n_regular, "maxItems": n_regular},
            "contrastive_pair": {
                "type": "object",
                "properties": {
                    "factor_type": {"type": "string", "enum": list(FACTOR_TYPES)},
                    "first": body,
                    "second": body,
                },
                "required": ["factor_type", "first", "second"],
            },
        },
        "required": ["factors", "contrastive_pair"],
    }


def parse_factors(n_regular: int) -> Callable[[str], list[dict[str, Any]]]:
    """Parse the factor list into the official raw shape, with exactly one mutual pair."""
    base = parse_model(FactorsOut, "context factors")

    def parse(text: str) -> list[dict[str, Any]]:
        out = base(text)
        if len(out.factors) != n_regular:
            raise ParseError(f"context factors: {len(out.factors)} ordinary factors, expected {n_regular}")
        pair = out.contrastive_pair
        rows = [{**f.model_dump(), "related_factor": None} for f in out.factors]
        first = {**pair.first.model_dump(), "factor_type": pair.factor_type}
        second = {**pair.second.model_dump(), "factor_type": pair.factor_type}
        first["related_factor"], second["related_factor"] = second["factor"], first["factor"]
        rows += [first, second]
        # Weak models repeat names; a repeat is renamed (and flagged) rather than failing.
        seen: set[str] = set()
        for row in rows:
            name, k = row["factor"], 2
            while name.lower() in seen:
                name, k = f"{row['factor']} ({k})", k + 1
            if name != row["factor"]:
                row["renamed_from"] = row["factor"]
                for other in rows:
                    if (
                        other["related_factor"] == row["factor"]
                        and other is not row
                        and row["related_factor"]
                    ):
                        other["related_factor"] = name
                row["factor"] = name
            seen.add(name.lower())
        order = ("factor_type", "background", "factor", "task_types", "preference_type", "preference")
        extra = ("renamed_from", "regenerated")
        return [{k: r[k] for k in (*order, "related_factor", *extra) if k in r} for r in rows]

    return parse


class ChangedOut(ModelOutput):
    preference_type: PreferenceType
    preference: str = Field(min_length=10, max_length=400)
    conflict: str = Field("", max_length=600)

    @field_validator("preference")
    @classmethod
    def _sentence(cls, value: str) -> str:
        return a_sentence(value)


CONTRAST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "preference_type": {"type": "string", "enum": list(PREFERENCE_TYPES)},
        "preference": PREFERENCE_TEXT,
    },
    "required": ["preference_type", "preference"],
}
# The changed preference A' also names what of A it overturns (the paper requires A' to be
# incompatible with A; the verifier's judge checks that it is).
CHANGED_SCHEMA: dict[str, Any] = {
    **CONTRAST_SCHEMA,
    "properties": {**CONTRAST_SCHEMA["properties"], "conflict": text_schema(250, 5)},
    "required": ["preference_type", "preference", "conflict"],
}


def too_similar(a: str, b: str) -> bool:
    """Whether two preferences are the same or nearly so (a copy, not a change or a contrast)."""
    return (
        a.lower().strip(" .") == b.lower().strip(" .") or min(lexical_leak(a, b), lexical_leak(b, a)) >= 0.9
    )


def parse_changed(
    original: str, what: str = "changed preference", *, conflict: bool = False
) -> Callable[[str], dict[str, Any]]:
    """Parse a changed (or contrastive) preference; with `conflict`, the answer must also say
    what of the original it overturns."""
    base = parse_model(ChangedOut, what)

    def parse(text: str) -> dict[str, Any]:
        out = base(text)
        preference = " ".join(out.preference.split())
        if too_similar(preference, original):
            raise ParseError(f"{what}: (nearly) identical to the preference it must differ from")
        record = {"preference_type": out.preference_type, "preference": preference}
        if conflict:
            if not out.conflict.strip():
                raise ParseError(f"{what}: 'conflict' must say what of the old preference it overturns")
            record["conflict"] = " ".join(out.conflict.split())
        return record

    return parse


class SessionOut(ModelOutput):
    task_type: TaskType
    story: str = Field(min_length=1, max_length=1200)
    request_with_factor_and_preference: str = Field(min_length=1, max_length=2500)
    request_with_factor: str = Field(min_length=1, max_length=2500)
    resource: str = Field("", max_length=4000)

    @field_validator("request_with_factor", "request_with_factor_and_preference")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


SESSION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task_type": {"type": "string", "enum": list(TASK_TYPES)},
        "story": text_schema(500),
        "request_with_factor_and_preference": text_schema(600, 5),
        "request_with_factor": text_schema(600, 5),
        "resource": text_schema(600, 0),
    },
    "required": [
        "task_type",
        "story",
        "request_with_factor_and_preference",
        "request_with_factor",
        "resource",
    ],
}


class UserTurnOut(ModelOutput):
    met: list[bool]
    score: int = Field(ge=1, le=10)
    hinted_items: list[int] = Field(default_factory=list)
    message: str = Field(min_length=1, max_length=2000)


def user_turn_schema(n_items: int) -> dict[str, Any]:
    """One verdict per checklist item, in order (positions, not numbers: weak models repeat
    numbers), the 1-10 score, the items hinted at, and the user's next message."""
    return {
        "type": "object",
        "properties": {
            "met": {"type": "array", "items": {"type": "boolean"}, "minItems": n_items, "maxItems": n_items},
            "score": {"type": "integer", "enum": list(range(1, 11))},
            "hinted_items": {
                "type": "array",
                "items": {"type": "integer", "enum": list(range(1, n_items + 1))},
                "maxItems": n_items,
            },
            "message": text_schema(500),
        },
        "required": ["met", "score", "hinted_items", "message"],
    }


def parse_user_turn(n_items: int) -> Callable[[str], dict[str, Any]]:
    base = parse_model(UserTurnOut, "user simulator")

    def parse(text: str) -> dict[str, Any]:
        out = base(text)
        if len(out.met) != n_items:
            raise ParseError(f"user simulator: {len(out.met)} verdicts for {n_items} checklist items")
        if any(not 1 <= i <= n_items for i in out.hinted_items):
            raise ParseError(f"user simulator: hinted_items {out.hinted_items} outside 1..{n_items}")
        if not out.message.strip():
            raise ParseError("user simulator: empty message")
        return {
            **out.model_dump(),
            "hinted_items": sorted(set(out.hinted_items)),
            "message": out.message.strip(),
        }

    return parse


class LeakOut(ModelOutput):
    states_preference: bool
    evidence: str = ""


LEAK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"states_preference": {"type": "boolean"}, "evidence": text_schema(200, 0)},
    "required": ["states_preference", "evidence"],
}


def _non_empty_reply(text: str) -> str:
    if not text.strip():
        raise ParseError("assistant simulator: empty reply")
    return text.strip()


# --- the session plan (pure) ----------------------------------------------------------------


def plan_sessions(
    n_sessions: int, current: str, contrast: str, others: Sequence[str], rng: random.Random
) -> list[tuple[PlanRole, str]]:
    """Which factor (and role) each session has, as in the paper's pipeline.

    Four positions drawn from range(n-2) plus the last one carry the current factor: the
    first two with its original preference, the rest (including the last) with the changed
    one. Two of the remaining positions carry the contrastive factor; the rest cycle through
    the other factors in a shuffled order.
    """
    if n_sessions < MIN_SESSIONS:
        raise ValueError(f"need at least {MIN_SESSIONS} sessions")
    if not others:
        raise ValueError("need at least one factor besides the contrastive pair")
    positions = [*sorted(rng.sample(range(n_sessions - 2), 4)), n_sessions - 1]
    plan: dict[int, tuple[PlanRole, str]] = {}
    for k, index in enumerate(positions):
        plan[index] = ("A" if k < 2 else "A_changed", current)
    rest = [i for i in range(n_sessions) if i not in plan]
    for index in rng.sample(rest, 2):
        plan[index] = ("B", contrast)
    pool = list(others)
    rng.shuffle(pool)
    cursor = 0
    for index in range(n_sessions):
        if index not in plan:
            plan[index] = ("other", pool[cursor % len(pool)])
            cursor += 1
    return [plan[i] for i in range(n_sessions)]


def format_conversation(chat: Sequence[dict[str, str]]) -> str:
    names = {"user": "You", "assistant": "AI assistant"}
    return "\n\n".join(f"[{names[m['role']]}]\n{m['content']}" for m in chat)


def interaction_record(
    session: dict[str, Any],
    checklist: list[str],
    chat: list[dict[str, str]],
    scores: Sequence[int | None],
    satisfied: bool,
    referred: set[int],
) -> dict[str, Any]:
    """One simulated dialogue as stored (the CUPID-Raw `interactions` entry). `unreferenced_items`:
    the items the user simulator never said it referred to (the paper's rule: every item at least
    once by the last message); the verifier checks the text itself."""
    return {
        "session_id": session["id"],
        "preference": session["preference"],
        "checklist": checklist,
        "chat": chat,
        "scores": list(scores),
        "is_satisfied": satisfied,
        "unreferenced_items": [k for k in range(1, len(checklist) + 1) if k not in referred]
        if scores
        else [],
    }


def opening_message(session: dict[str, Any]) -> str:
    request = str(session["request_with_factor"])
    resource = str(session.get("resource") or "").strip()
    return f"{request}\n\n{resource}" if resource else request


# --- the pipeline ---------------------------------------------------------------------------


@dataclass
class CupidModels:
    generator: Model
    user_simulator: Model
    assistant: Model
    decomposer: Model
    leak_judge: Model | None = None
    verifier: Model | None = None


class CupidSynthesizer:
    """Runs the stages of one persona; pure helpers above do the structural work."""

    def __init__(
        self,
        config: CupidSynthConfig,
        models: CupidModels,
        store: StateStore,
        paper: PaperSynthPrompts | None = None,
    ) -> None:
        if (config.protocol == "paper") != (paper is not None):
            raise ConfigError("the official synthesis prompts are needed exactly under --protocol paper")
        self.config = config
        self.models = models
        self.store = store
        self.paper = paper

    def _cfg(self, stage: str, schema: dict[str, Any] | None, name: str) -> Any:
        # The paper's one-call journey ("sessions") samples as a session; its budget is its own.
        temperature = self.config.temperature["session" if stage == "sessions" else stage]
        max_tokens = self.config.max_tokens.get(stage, PAPER_MAX_TOKENS.get(stage, 0))
        if schema is None:
            return GenerateConfig(
                temperature=temperature,
                max_tokens=max_tokens,
                seed=common.attempt_seed(self.config.seed),
                sample_index=ATTEMPT.get(),
            )
        schema = scale_lengths(schema, self.config.length_scale)
        return json_config(
            name, schema, temperature=temperature, max_tokens=max_tokens, seed=self.config.seed
        )

    async def run(self, template: dict[str, Any]) -> UnitState:
        pid = persona_id(template)
        stage = common.resume_unit(self.store, pid, {"template": template})
        if stage.finished:
            return stage.state
        current = "persona"
        try:
            current = "persona"
            persona = await self._persona(stage, template)
            current = "factors"
            factors = await self._factors(stage, persona)
            sessions: list[dict[str, Any]] = []
            if self.paper is not None:  # the whole journey in one call, as upstream
                current = "sessions"
                plan_info, sessions = await self._paper_sessions(stage, persona, factors, pid, self.paper)
            else:
                current = "changed"
                plan_info = await self._changed(stage, persona, factors, pid)
                for i in range(self.config.n_sessions):
                    current = f"session/{i}"
                    sessions.append(await self._session(stage, persona, factors, plan_info, sessions, i))
            current = "checklists"
            checklists = await self._checklists(stage, sessions)
            current = "dialogues"
            interactions = await self._dialogues(stage, persona, sessions, checklists)
            current = "instances"
            built = self._instances(stage, pid, sessions, checklists, interactions)
            current = "leak_check"
            await self._leak_check(stage, built)
            if self.models.verifier is not None:
                current = "verify"
                await self._verify(stage, persona, sessions, checklists, interactions, plan_info, built)
        except StepFailed as exc:
            return stage.fail(current, str(exc))
        except (ValueError, ParseError) as exc:
            return stage.fail_output(current, exc)
        return stage.complete()

    async def _generate(
        self,
        stage: Stage,
        name: str,
        template: str,
        *,
        values: Mapping[str, str],
        config: GenerateConfig,
        parse: Callable[[str], _T],
    ) -> _T:
        """One generator step: the named template with `values`, re-asked on an unparseable reply."""
        return await stage.steps.call(
            name,
            role="generator",
            model=self.models.generator,
            template=load_template(TEMPLATES[template]),
            values=values,
            config=config,
            parse=parse,
            reasks=self.config.reasks,
        )

    async def _paper_call(
        self,
        stage: Stage,
        name: str,
        path: str,
        messages: list[Message],
        budget: str,
        parse: Callable[[str], _T],
    ) -> _T:
        """One generator call with an official prompt (free text, read by the official parser)."""
        assert self.paper is not None
        return await stage.steps.call_messages(
            name,
            role="generator",
            model=self.models.generator,
            messages=messages,
            config=self._cfg(budget, None, name),
            parse=parse,
            template=paper_label(path, self.paper.source["files"][path]),
            reasks=self.config.reasks,
        )

    async def _persona(self, stage: Stage, template: dict[str, Any]) -> dict[str, Any]:
        if stage.done("persona"):
            return stage.output("persona")  # type: ignore[no-any-return]
        if self.paper is not None:
            out = await self._paper_call(
                stage,
                "persona",
                PERSONA_GENERATOR_YAML,
                paper_persona_messages(self.paper, template),
                "persona",
                parse_paper_persona,
            )
            record = {
                **template,
                "description": out["description"],
                "generated_occupation": out["occupation"],
            }
            return stage.finish("persona", record)  # type: ignore[no-any-return]
        data: dict[str, Any] = await self._generate(
            stage,
            "persona",
            "persona",
            values={
                "seed": template["seed"],
                "occupation": template["occupation"].replace("_", " "),
                "career_level": template["career_level"],
                "traits": ", ".join(template["personality_traits"]),
                "values": ", ".join(template["personal_values"]),
                "decision_style": template["decision_making_styles"],
            },
            config=self._cfg("persona", PERSONA_SCHEMA, "synth_persona"),
            parse=lambda text: parse_model(PersonaOut, "persona")(text).model_dump(),
        )
        record = {**template, "description": f"{data['name']}: {data['description']}", "name": data["name"]}
        return stage.finish("persona", record)  # type: ignore[no-any-return]

    async def _factors(self, stage: Stage, persona: dict[str, Any]) -> list[dict[str, Any]]:
        if stage.done("factors"):
            return stage.output("factors")  # type: ignore[no-any-return]
        if self.paper is not None:
            paper_factors = await self._paper_call(
                stage,
                "factors",
                FACTORS_GENERATOR_YAML,
                paper_factors_messages(self.paper, persona["description"], self.config.n_factors),
                "factors",
                parse_paper_factors,
            )
            return stage.finish("factors", paper_factors)  # type: ignore[no-any-return]
        n_regular = self.config.n_factors - 2
        factors = await self._generate(
            stage,
            "factors",
            "factors",
            values={
                "persona": persona["description"],
                "n_regular": str(n_regular),
                "factor_types": ", ".join(FACTOR_TYPES),
                "task_types": ", ".join(TASK_TYPES),
                "preference_types": ", ".join(PREFERENCE_TYPES),
            },
            config=self._cfg("factors", factors_schema(n_regular), "synth_factors"),
            parse=parse_factors(n_regular),
        )
        first, second = factors[-2], factors[-1]
        if too_similar(first["preference"], second["preference"]):
            # Weak models copy the first preference of the pair; ask for the contrast alone.
            contrast = await self._generate(
                stage,
                "factors/contrast",
                "contrast",
                values={
                    "first_factor": first["factor"],
                    "first_preference": first["preference"],
                    "second_factor": second["factor"],
                    "preference_types": ", ".join(PREFERENCE_TYPES),
                },
                config=self._cfg("changed", CONTRAST_SCHEMA, "synth_contrast_preference"),
                parse=parse_changed(first["preference"], "contrastive preference"),
            )
            factors[-1] = {**second, **contrast, "regenerated": "preference"}
        return stage.finish("factors", factors)  # type: ignore[no-any-return]

    def _draw_plan(
        self, factors: list[dict[str, Any]], pid: str
    ) -> tuple[dict[str, Any], dict[str, Any], list[tuple[PlanRole, str]]]:
        """Which factor of the contrastive pair is current (A) and which the contrast (B), and the
        session plan; seeded by the persona, so both protocols draw the same plan."""
        rng = random.Random(f"cupid-plan:{self.config.seed}:{pid}")
        pair = [f for f in factors if f["related_factor"]]
        current = rng.choice(pair)
        contrast = next(f for f in pair if f is not current)
        others = [f["factor"] for f in factors if not f["related_factor"]]
        plan = plan_sessions(self.config.n_sessions, current["factor"], contrast["factor"], others, rng)
        return current, contrast, plan

    def _plan_roles(self, factors: list[dict[str, Any]], pid: str) -> list[str]:
        """The session plan's roles (A, A', B, other), drawn as for our protocol."""
        return [role for role, _ in self._draw_plan(factors, pid)[2]]

    async def _paper_sessions(
        self,
        stage: Stage,
        persona: dict[str, Any],
        factors: list[dict[str, Any]],
        pid: str,
        paper: PaperSynthPrompts,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The official session generator: one call for the whole journey, its structure our plan's
        roles (the model picks which of the pair is A, as upstream); stored as our `changed` and
        `session/<i>` stages so the checks and outputs read it as any journey."""
        names = [f"session/{i}" for i in range(self.config.n_sessions)]
        if stage.done("changed") and all(stage.done(n) for n in names):
            return stage.output("changed"), [stage.output(n) for n in names]
        roles = self._plan_roles(factors, pid)
        out = await self._paper_call(
            stage,
            "sessions",
            SESSIONS_GENERATOR_YAML,
            paper_sessions_messages(paper, persona["description"], factors, roles),
            "sessions",
            lambda text: parse_paper_sessions(text, factors, roles),
        )
        for name, session in zip(names, out["sessions"], strict=True):
            stage.finish(name, session)
        return stage.finish("changed", out["info"]), out["sessions"]

    async def _changed(
        self, stage: Stage, persona: dict[str, Any], factors: list[dict[str, Any]], pid: str
    ) -> dict[str, Any]:
        if stage.done("changed"):
            return stage.output("changed")  # type: ignore[no-any-return]
        current, contrast, plan = self._draw_plan(factors, pid)
        changed = await self._generate(
            stage,
            "changed",
            "changed",
            values={
                "persona": persona["description"],
                "factor": current["factor"],
                "preference": current["preference"],
                "preference_types": ", ".join(PREFERENCE_TYPES),
            },
            config=self._cfg("changed", CHANGED_SCHEMA, "synth_changed_preference"),
            parse=parse_changed(current["preference"], conflict=True),
        )
        info = {
            "current_factor": current["factor"],
            "contrastive_factor": contrast["factor"],
            "changed_preference": changed["preference"],
            "changed_preference_type": changed["preference_type"],
            "changed_conflict": changed["conflict"],
            "plan": [list(p) for p in plan],
        }
        return stage.finish("changed", info)  # type: ignore[no-any-return]

    async def _session(
        self,
        stage: Stage,
        persona: dict[str, Any],
        factors: list[dict[str, Any]],
        info: dict[str, Any],
        earlier: list[dict[str, Any]],
        i: int,
    ) -> dict[str, Any]:
        name = f"session/{i}"
        if stage.done(name):
            return stage.output(name)  # type: ignore[no-any-return]
        role, factor_name = info["plan"][i]
        factor = next(f for f in factors if f["factor"] == factor_name)
        preference = info["changed_preference"] if role == "A_changed" else factor["preference"]
        out = await self._generate(
            stage,
            name,
            "session",
            values={
                "persona": persona["description"],
                "number": str(i + 1),
                "total": str(self.config.n_sessions),
                "previous": earlier[-1]["story"] if earlier else "(none; this is the first)",
                "factor": factor_name,
                "preference": preference,
                "task_types": ", ".join(factor["task_types"]),
            },
            config=self._cfg("session", SESSION_SCHEMA, "synth_session"),
            parse=lambda text: parse_model(SessionOut, "session")(text).model_dump(),
        )
        session = {
            "id": i,
            "context_factor": factor_name,
            "preference": preference,
            "plan": role,
            **out,
            "resource": out["resource"].strip() or None,
        }
        return stage.finish(name, session)  # type: ignore[no-any-return]

    def _decompose(self, stage: Stage, k: int, preference: str) -> Any:
        """One decomposer call: the official prompt and JSON answer under --protocol paper, else our
        checklist-only decomposer with its schema."""
        name, model, reasks = f"decompose/{k}", self.models.decomposer, self.config.reasks
        if self.paper is not None:
            return stage.steps.call_messages(
                name,
                role="decomposer",
                model=model,
                messages=paper_decomposer_messages(self.paper, preference),
                config=self._cfg("decomposer", None, "checklist"),
                parse=parse_paper_checklist,
                template=self.paper.decomposer.label(),
                reasks=reasks,
            )
        return stage.steps.call(
            name,
            role="decomposer",
            model=model,
            template=load_template(TEMPLATES["decompose"]),
            values={"preference": preference},
            config=self._cfg("decomposer", CHECKLIST_ONLY_SCHEMA, "checklist"),
            parse=parse_checklist,
            reasks=reasks,
        )

    async def _checklists(self, stage: Stage, sessions: list[dict[str, Any]]) -> dict[str, list[str]]:
        if stage.done("checklists"):
            return stage.output("checklists")  # type: ignore[no-any-return]
        unique = list(dict.fromkeys(s["preference"] for s in sessions))
        results = await asyncio.gather(
            *(self._decompose(stage, k, preference) for k, preference in enumerate(unique)),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                stage.state.steps.update(stage.steps.steps)
                raise result
        return stage.finish("checklists", dict(zip(unique, results, strict=True)))  # type: ignore[no-any-return]

    async def _paper_dialogue(
        self,
        stage: Stage,
        persona: dict[str, Any],
        session: dict[str, Any],
        checklist: list[str],
        name: str,
        paper: PaperSynthPrompts,
    ) -> dict[str, Any]:
        """A dialogue with the official simulators (paper protocol): the assistant simulator answers,
        the user simulator evaluates against the checklist and writes the next message or ENDs."""
        chat = [{"role": "user", "content": paper_opening(session)}]
        raw_turns: list[str] = []
        scores: list[int | None] = []
        referred: set[int] = set()
        ended = False
        turns = 0 if session["id"] == self.config.n_sessions - 1 else self.config.max_turns
        for t in range(turns):
            reply = await stage.steps.call_messages(
                f"{name}/assistant/{t}",
                role="assistant",
                model=self.models.assistant,
                messages=paper_assistant_messages(paper, chat),
                config=self._cfg("assistant", None, "assistant"),
                parse=_non_empty_reply,
                template=paper_label(ASSISTANT_SIMULATOR_YAML, paper.assistant_simulator_sha256),
            )
            chat.append({"role": "assistant", "content": reply})
            messages = paper_user_messages(
                paper,
                persona=persona["description"],
                factor=session["context_factor"],
                preference=session["preference"],
                checklist=checklist,
                chat=chat,
                raw_turns=raw_turns,
            )
            verdict = await stage.steps.call_messages(
                f"{name}/user/{t}",
                role="user_simulator",
                model=self.models.user_simulator,
                messages=messages,
                config=self._cfg("user_simulator", None, "user_simulator"),
                parse=lambda text: {**parse_paper_user_turn(text, len(checklist)), "raw": text.strip()},
                template=paper_label(USER_SIMULATOR_YAML, paper.user_simulator_sha256),
                reasks=self.config.reasks,
            )
            raw_turns.append(verdict["raw"])
            chat.append({"role": "user", "content": verdict["message"]})
            scores.append(verdict["score"])
            referred.update(verdict["hinted_items"])
            if verdict["end"]:
                ended = True
                break
        interaction = interaction_record(session, checklist, chat, scores, ended, referred)
        interaction["user_simulator_raw"] = raw_turns  # its whole answers: the chat it sees next turn
        return stage.finish(name, interaction)  # type: ignore[no-any-return]

    async def _dialogue(
        self,
        stage: Stage,
        persona: dict[str, Any],
        session: dict[str, Any],
        checklist: list[str],
        prefix: str = "",
    ) -> dict[str, Any]:
        i = session["id"]
        name = f"{prefix}dialogue/{i}"
        if stage.done(name):
            return stage.output(name)  # type: ignore[no-any-return]
        if self.paper is not None:
            return await self._paper_dialogue(stage, persona, session, checklist, name, self.paper)
        chat = [{"role": "user", "content": opening_message(session)}]
        scores: list[int] = []
        last = i == self.config.n_sessions - 1
        turns = 0 if last else self.config.max_turns
        assistant = load_template(TEMPLATES["assistant"])
        user_turn = load_template(TEMPLATES["user_turn"])
        referred: set[int] = set()
        for t in range(turns):
            system = assistant.render(request=chat[0]["content"])
            messages = [*system, *(Message(role=m["role"], content=m["content"]) for m in chat[1:])]  # type: ignore[arg-type]
            reply = await stage.steps.call_messages(
                f"{name}/assistant/{t}",
                role="assistant",
                model=self.models.assistant,
                messages=messages,
                config=self._cfg("assistant", None, "assistant"),
                parse=_non_empty_reply,
                template=assistant,
            )
            chat.append({"role": "assistant", "content": reply})
            verdict = await stage.steps.call(
                f"{name}/user/{t}",
                role="user_simulator",
                model=self.models.user_simulator,
                template=user_turn,
                values={
                    "persona": persona["description"],
                    "factor": session["context_factor"],
                    "preference": session["preference"],
                    "checklist": format_checklist(checklist),
                    "unreferenced": ", ".join(
                        str(k) for k in range(1, len(checklist) + 1) if k not in referred
                    )
                    or "(none)",
                    "round_note": "This is your last message in this conversation." if t == turns - 1 else "",
                    "conversation": format_conversation(chat),
                },
                config=self._cfg("user_simulator", user_turn_schema(len(checklist)), "synth_user_turn"),
                parse=parse_user_turn(len(checklist)),
                reasks=self.config.reasks,
            )
            chat.append({"role": "user", "content": verdict["message"]})
            scores.append(verdict["score"])
            referred.update(verdict["hinted_items"])
            if verdict["score"] == 10:
                break
        satisfied = bool(scores) and scores[-1] == 10
        interaction = interaction_record(session, checklist, chat, scores, satisfied, referred)
        return stage.finish(name, interaction)  # type: ignore[no-any-return]

    async def _dialogues(
        self,
        stage: Stage,
        persona: dict[str, Any],
        sessions: list[dict[str, Any]],
        checklists: dict[str, list[str]],
    ) -> list[dict[str, Any]]:
        results = await asyncio.gather(
            *(self._dialogue(stage, persona, s, checklists[s["preference"]]) for s in sessions),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(results)  # type: ignore[arg-type]

    def _instances(
        self,
        stage: Stage,
        pid: str,
        sessions: list[dict[str, Any]],
        checklists: dict[str, list[str]],
        interactions: list[dict[str, Any]],
    ) -> dict[str, Any]:
        if stage.done("instances"):
            return stage.output("instances")  # type: ignore[no-any-return]
        journey = journey_from(pid, sessions, checklists, interactions)
        instances = build_instances(journey, seed=self.config.seed, n_prior=self.config.n_prior)
        built = {"instances": [i.model_dump(mode="json") for i in instances]}
        return stage.finish("instances", built)  # type: ignore[no-any-return]

    async def _leak_check(self, stage: Stage, built: dict[str, Any]) -> dict[str, Any]:
        if stage.done("leak_check"):
            return stage.output("leak_check")  # type: ignore[no-any-return]
        instances = [CupidInstance.model_validate(i) for i in built["instances"]]
        request = instances[0].current_request
        preferences = list(dict.fromkeys(i.current_contextual_preference for i in instances))
        report: dict[str, Any] = {
            "lexical": {p: lexical_leak(request, p) for p in preferences},
            "judge": None,
        }
        if self.models.leak_judge is not None:
            verdicts = {}
            for k, preference in enumerate(preferences):
                try:
                    verdict = await stage.steps.call(
                        f"leak_check/{k}",
                        role="leak_judge",
                        model=self.models.leak_judge,
                        template=load_template(TEMPLATES["leak_check"]),
                        values={"preference": preference, "request": request},
                        config=self._cfg("leak_judge", LEAK_SCHEMA, "synth_leak_check"),
                        parse=lambda text: parse_model(LeakOut, "leak check")(text).model_dump(),
                        reasks=self.config.reasks,
                    )
                except StepFailed as exc:
                    # Never read as "no leak": recorded, and the persona fails validation.
                    verdict = {"error": str(exc)}
                verdicts[preference] = verdict
            report["judge"] = verdicts
        return stage.finish("leak_check", report)  # type: ignore[no-any-return]

    async def _verify_round(
        self,
        stage: Stage,
        prefix: str,
        labels: Sequence[str],
        preferences: dict[str, str],
        checklists: dict[str, list[str]],
        chats: dict[str, list[list[dict[str, str]]]],
    ) -> dict[str, Any]:
        """One verifier call per preference: which of its checklist items the user's messages express."""
        items: dict[str, Any] = {}
        for label in labels:
            checklist = checklists[preferences[label]]
            try:
                items[label] = await stage.steps.call(
                    f"{prefix}items/{label}",
                    role="verifier",
                    model=self.models.verifier,  # type: ignore[arg-type]
                    template=load_template(TEMPLATES["verify_items"]),
                    values={
                        "preference": preferences[label],
                        "checklist": format_checklist(checklist),
                        "dialogues": user_side(chats[label]),
                    },
                    config=self._cfg("verifier", items_schema(len(checklist)), "synth_verify_items"),
                    parse=parse_items(len(checklist)),
                    reasks=self.config.reasks,
                )
            except StepFailed as exc:
                items[label] = {"error": str(exc)}  # never read as "expressed"
        return items

    async def _verify_one(
        self,
        stage: Stage,
        name: str,
        key: str,
        schema: dict[str, Any],
        out: type[Any],
        values: dict[str, str],
    ) -> dict[str, Any]:
        try:
            return await stage.steps.call(  # type: ignore[no-any-return]
                name,
                role="verifier",
                model=self.models.verifier,  # type: ignore[arg-type]
                template=load_template(TEMPLATES[key]),
                values=values,
                config=self._cfg("verifier", schema, f"synth_{key}"),
                parse=lambda text: parse_model(out, name)(text).model_dump(),
                reasks=self.config.reasks,
            )
        except StepFailed as exc:
            return {"error": str(exc)}

    async def _verify(
        self,
        stage: Stage,
        persona: dict[str, Any],
        sessions: list[dict[str, Any]],
        checklists: dict[str, list[str]],
        interactions: list[dict[str, Any]],
        info: dict[str, Any],
        built: dict[str, Any],
    ) -> dict[str, Any]:
        """The annotators' check, by a judge: every instance is verified, repaired (its failing
        preferences' dialogues re-simulated once, as a new sample) or dropped with the reasons."""
        if stage.done("verify"):
            return stage.output("verify")  # type: ignore[no-any-return]
        by_role = {"A": "current", "A_changed": "changed", "B": "contrastive"}
        prior = sessions[:-1]
        preferences = {by_role[s["plan"]]: s["preference"] for s in prior if s["plan"] in by_role}
        sessions_of = {label: [s for s in prior if by_role.get(s["plan"]) == label] for label in preferences}
        missing = [label for label in ("current", "changed", "contrastive") if label not in preferences]
        if missing:
            raise ValueError(f"the session plan has no prior session for the {', '.join(missing)} preference")
        chats = {
            label: [interactions[s["id"]]["chat"] for s in group] for label, group in sessions_of.items()
        }
        labeled = {label: checklists[p] for label, p in preferences.items()}
        request = str(built["instances"][0]["current_request"])
        verdicts: dict[str, Any] = {
            "items": await self._verify_round(
                stage, "verify/", list(preferences), preferences, checklists, chats
            ),
            "request": {
                label: await self._verify_one(
                    stage,
                    f"verify/request/{label}",
                    "verify_request",
                    REQUEST_SCHEMA,
                    RequestVerdict,
                    {"preference": preferences[label], "request": request},
                )
                for label in ("current", "changed")
            },
            "change": await self._verify_one(
                stage,
                "verify/change",
                "verify_change",
                CHANGE_SCHEMA,
                ChangeVerdict,
                {
                    "factor": info["current_factor"],
                    "old": preferences["current"],
                    "new": preferences["changed"],
                },
            ),
        }
        first = {itype: instance_reasons(itype, verdicts, labeled) for itype in NEEDS}
        to_repair = sorted(
            {
                label
                for itype, reasons in first.items()
                if repairable(reasons)
                for label in NEEDS[itype][0]
                if any(r.startswith(f"items ({label})") for r in reasons)
            }
        )
        rounds = [verdicts]
        final = dict(first)
        repaired_sessions: list[int] = []
        if to_repair:
            token = ATTEMPT.set(REPAIR_SAMPLE + stage.state.attempt)
            try:
                group = [s for label in to_repair for s in sessions_of[label]]
                redone = await gather_steps(
                    *(
                        self._dialogue(stage, persona, s, checklists[s["preference"]], prefix="repair/")
                        for s in group
                    )
                )
            finally:
                ATTEMPT.reset(token)
            interactions = [*interactions]
            for s, interaction in zip(group, redone, strict=True):
                interactions[s["id"]] = interaction
                repaired_sessions.append(s["id"])
            chats = {
                label: [interactions[s["id"]]["chat"] for s in group] for label, group in sessions_of.items()
            }
            again = {
                **verdicts,
                "items": {
                    **verdicts["items"],
                    **await self._verify_round(
                        stage, "repair/verify/", to_repair, preferences, checklists, chats
                    ),
                },
            }
            rounds.append(again)
            final = {
                itype: instance_reasons(itype, again, labeled) if repairable(reasons) else reasons
                for itype, reasons in first.items()
            }
            journey = journey_from(stage.state.unit_id, sessions, checklists, interactions)
            rebuilt = build_instances(journey, seed=self.config.seed, n_prior=self.config.n_prior)
            instances = [i.model_dump(mode="json") for i in rebuilt]
        else:
            instances = list(built["instances"])
        decisions = {
            itype: {
                "decision": "verified" if not first[itype] else "repaired" if not final[itype] else "dropped",
                "first_reasons": first[itype],
                "reasons": final[itype],
            }
            for itype in NEEDS
        }
        result = {
            "preferences": preferences,
            "rounds": rounds,
            "repaired_sessions": sorted(repaired_sessions),
            "decisions": decisions,
            "instances": [i for i in instances if decisions[i["instance_type"]]["decision"] != "dropped"],
            "dropped_instances": [
                i for i in instances if decisions[i["instance_type"]]["decision"] == "dropped"
            ],
        }
        return stage.finish("verify", result)  # type: ignore[no-any-return]


def journey_from(
    pid: str,
    sessions: list[dict[str, Any]],
    checklists: dict[str, list[str]],
    interactions: list[dict[str, Any]],
) -> PersonaJourney:
    planned = []
    for session, interaction in zip(sessions, interactions, strict=True):
        planned.append(
            PlannedSession(
                context_factor=session["context_factor"],
                contextual_preference=session["preference"],
                checklist=tuple(checklists[session["preference"]]),
                plan=session["plan"],
                dialogue=tuple(Message(role=m["role"], content=m["content"]) for m in interaction["chat"]),
            )
        )
    return PersonaJourney(persona_id=pid, sessions=tuple(planned))


# --- driving a whole synthesis --------------------------------------------------------------


def build_models(config: CupidSynthConfig, factory: ModelFactory) -> CupidModels:
    return CupidModels(
        generator=factory.get(config.generator),
        user_simulator=factory.get(config.user_simulator),
        assistant=factory.get(config.assistant),
        decomposer=factory.get(config.decomposer),
        leak_judge=factory.get(config.leak_judge) if config.leak_judge else None,
        verifier=factory.get(config.verifier) if config.verifier else None,
    )


def synthesize_cupid(
    config: CupidSynthConfig,
    out: Path,
    factory: ModelFactory,
    *,
    verify_against: Path | None = None,
    protocol_dir: Path | None = None,
    **pool: Unpack[common.PoolOptions],
) -> SynthResult:
    """Generate (or resume) a CUPID-style dataset in `out` (4 personas at once by default); returns
    the summary. With `verify_against` (human labels), the summary reports the verifier's agreement
    with them; `protocol_dir` holds the official files under --protocol paper."""
    if verify_against is not None and config.verifier is None:
        raise ConfigError("--verify-against needs the verifier stage (set a verifier model)")
    seeds = common.unit_seeds(config.seeds_file, config.n_personas, config.allow_seed_reuse, "personas")
    templates = persona_templates(seeds, config.n_personas, config.seed)
    # the official texts are read (and checked against their pins) before any call
    paper = load_paper_synth_prompts(protocol_dir) if config.protocol == "paper" else None
    identity = config.identity()
    models_record = {r: factory.get(s).spec.to_record() for r in ROLES if (s := config.model_for(r))}
    upstream = {"upstream": dict(paper.source)} if paper is not None else {}
    common.start_output(out, "cupid", identity, config, models_record, **upstream)
    write_json(out / "persona_templates.json", templates)
    store = StateStore(out)
    models = build_models(config, factory)
    synthesizer = CupidSynthesizer(config, models, store, paper)

    states, usage = common.run_pool(
        out, factory, lambda: common.pool_units(templates, synthesizer.run, pool, 4), pool
    )
    summary = write_outputs(out, config, states, usage, verify_against)
    return SynthResult(out, summary, states)


def validate_states(states: Sequence[UnitState], config: CupidSynthConfig) -> dict[str, list[str]]:
    """Problems per finished persona (empty list = passed)."""
    return {
        s.unit_id: check_persona(s, config.n_prior, config.leak_threshold) for s in states if s.status == "ok"
    }

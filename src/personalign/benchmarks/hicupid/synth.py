"""HiCUPID-style synthesis: user metadata, dialogues that reveal it, and QA of three types.

Per user (a unit with its own state file, resumed by stage):
- metadata: a profile (age, gender, personality, occupation, income range) from a seed
  description; persona items, one per persona dimension, each a relation (with its
  sentiment) chosen in code plus an entity the model names; schedules at times chosen in code
  with events the model writes;
- dialogues: one multi-round persona dialogue per persona item that reveals it implicitly,
  one single-round dialogue per profile field and per schedule;
- QA: a persona question per persona item, multi-info questions combining one persona item
  with the profile, and schedule questions that ask to book something at a time that is
  already taken; each with a personalized and a general answer.

Output rows follow the official HiCUPID schema (``shared/specs/data.md`` 4.2): one dialogue
row per user->assistant turn and one QA row per question. These row models are our own and
must be checked against the HiCUPID loader once both are merged.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from personalign.errors import ConfigError, ParseError
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
    SynthSettings,
    UnitState,
    balanced_pick,
    content_words,
    json_config,
    lexical_leak,
    parse_model,
    scale_lengths,
    text_schema,
    write_jsonl,
)

if TYPE_CHECKING:  # Python 3.10 has no typing.Unpack
    from typing_extensions import Unpack

DIMENSIONS: tuple[str, ...] = (
    "Sports", "Fashion", "Electronics", "Game", "Movie", "Major", "Fitness", "Art", "Music", "Politics",
    "Beauty", "Animal", "Environment", "Religion", "Family", "Self-improvement", "Travel", "Car",
    "Technology", "Book", "Social Media", "Cooking & Baking", "Food", "Forms of Living", "Finance",
)  # fmt: skip
RELATIONS: dict[str, Literal["POS", "NEG"]] = {
    "likes": "POS",
    "dislikes": "NEG",
    "enjoys": "POS",
    "does not enjoy": "NEG",
    "supports": "POS",
    "does not support": "NEG",
    "is interested in": "POS",
    "is not interested in": "NEG",
    "has been to": "POS",
    "has not been to": "NEG",
    "owns": "POS",
    "does not own": "NEG",
}
# Relations that fit any topic, and the topics each other pair fits (no "Religion: has been to").
GENERAL_RELATIONS = ("likes", "dislikes", "is interested in", "is not interested in")
RELATION_TOPICS: dict[tuple[str, str], tuple[str, ...]] = {
    ("enjoys", "does not enjoy"): (
        "Sports", "Fashion", "Electronics", "Game", "Movie", "Major", "Fitness", "Art", "Music", "Beauty",
        "Animal", "Family", "Self-improvement", "Travel", "Car", "Technology", "Book", "Social Media",
        "Cooking & Baking", "Food", "Forms of Living",
    ),
    ("supports", "does not support"): (
        "Sports", "Politics", "Environment", "Religion", "Family", "Technology", "Social Media", "Finance",
        "Forms of Living",
    ),
    ("has been to", "has not been to"): ("Sports", "Movie", "Art", "Music", "Travel", "Food"),
    ("owns", "does not own"): (
        "Fashion", "Electronics", "Game", "Beauty", "Animal", "Car", "Technology", "Book", "Finance",
        "Forms of Living",
    ),
}  # fmt: skip


def relations_for(dimension: str) -> list[str]:
    """The relations that make sense for a persona dimension (the general ones plus its pairs)."""
    extra = [r for pair, topics in RELATION_TOPICS.items() if dimension in topics for r in pair]
    return [*GENERAL_RELATIONS, *extra]


def profile_seed(seed: int, user_id: int) -> int:
    """The generation seed of a user's profile: the run's seed and the user id, so users drawn from
    similar seeds are still sampled apart."""
    return seed * 1_000_003 + user_id


PROFILE_FIELDS = ("age", "gender", "personality", "occupation", "income_range")
TEMPLATES = {
    "profile": "synth/hicupid_profile",
    "personas": "synth/hicupid_personas",
    "schedules": "synth/hicupid_schedules",
    "persona_dialogue": "synth/hicupid_persona_dialogue",
    "single_dialogue": "synth/hicupid_single_dialogue",
    "qa": "synth/hicupid_qa",
}
QAType = Literal["persona", "profile", "schedule"]


# --- official row shapes (our own models of data.md 4.2) -----------------------------------


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PersonaMeta(_Row):
    category: str
    entity: str
    relation: str
    sentiment: Literal["POS", "NEG"]


class ProfileMeta(_Row):
    age: int = Field(ge=1, le=120)
    gender: str = Field(min_length=1)
    personality: str = Field(min_length=1)
    occupation: str = Field(min_length=1)
    income_range: str = Field(min_length=1)


class ScheduleMeta(_Row):
    datetime: str
    event: str


class QAMetadata(_Row):
    persona: PersonaMeta | None
    profile: ProfileMeta | None
    schedule: ScheduleMeta | None


class HicupidDialogueRow(_Row):
    user_id: int
    dialogue_id: int
    type: Literal["persona", "profile", "schedule"]
    user: str = Field(min_length=1)
    assistant: str = Field(min_length=1)


class HicupidQARow(_Row):
    user_id: int
    dialogue_id: list[int] = Field(min_length=1)
    question_id: int
    question: str = Field(min_length=1)
    personalized_answer: str = Field(min_length=1)
    general_answer: str = Field(min_length=1)
    type: QAType
    metadata: QAMetadata


# --- splits ---------------------------------------------------------------------------------

TEST2_SHARE = 1 / 6  # the paper: 250 of 1,500 users are unseen (Test Set 2)
TEST1_EVERY = 5  # every 5th question of a seen user is held out (Test Set 1)


def assign_splits(dialogue_rows: list[dict[str, Any]], qa_rows: list[dict[str, Any]]) -> dict[str, int]:
    """Add HiCUPID's split column in place and count questions per split.

    The last sixth of the users (at least one when there are two or more) are unseen: their
    dialogues go to the ``test`` dialogue split and their questions to ``test_2``. A seen user's
    dialogues are ``train``; every fifth of their questions (by question id) is ``test_1``, the rest
    ``train``. Deterministic, so a resumed or re-run synthesis writes the same splits.
    """
    users = sorted({row["user_id"] for row in dialogue_rows} | {row["user_id"] for row in qa_rows})
    n_unseen = round(len(users) * TEST2_SHARE) or (1 if len(users) >= 2 else 0)
    unseen = set(users[len(users) - n_unseen :]) if n_unseen else set()
    for row in dialogue_rows:
        row["split"] = "test" if row["user_id"] in unseen else "train"
    counts = {"train": 0, "test_1": 0, "test_2": 0}
    position: dict[int, int] = {}
    for row in sorted(qa_rows, key=lambda r: (r["user_id"], r["question_id"])):
        if row["user_id"] in unseen:
            row["split"] = "test_2"
        else:
            index = position[row["user_id"]] = position.get(row["user_id"], -1) + 1
            row["split"] = "test_1" if index % TEST1_EVERY == TEST1_EVERY - 1 else "train"
        counts[row["split"]] += 1
    return counts


# Token budget per stage (enough for the paper's sizes; a run may pass its own).
MAX_TOKENS: dict[str, int] = {
    "profile": 200,
    "personas": 800,
    "schedules": 600,
    "persona_dialogue": 2000,
    "single_dialogue": 300,
    "qa": 700,
}


# --- configuration --------------------------------------------------------------------------


@dataclass(frozen=True)
class HicupidSynthConfig(SynthSettings):
    """Sizes default to the paper's: 25 persona items, 5 profile fields, 10 schedules, 10-round
    persona dialogues, 5 multi-info questions; generation is greedy as in the paper."""

    generator: str
    temperature: float = 0.0
    leak_threshold: float = 0.6
    n_users: int = 2
    n_personas: int = 25
    n_schedules: int = 10
    n_multi: int = 5
    persona_rounds: int = 10
    max_tokens: dict[str, int] = field(default_factory=lambda: dict(MAX_TOKENS))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_users < 1:
            raise ConfigError("n_users must be at least 1")
        if not 1 <= self.n_personas <= len(DIMENSIONS):
            raise ConfigError(f"n_personas must be between 1 and {len(DIMENSIONS)} (one per dimension)")
        if self.n_schedules < 1 or self.persona_rounds < 1:
            raise ConfigError("n_schedules and persona_rounds must be at least 1")
        if not 0 <= self.n_multi <= self.n_personas:
            raise ConfigError("n_multi must be between 0 and n_personas")

    @property
    def dialogues_per_user(self) -> int:
        return self.n_personas + len(PROFILE_FIELDS) + self.n_schedules

    @property
    def questions_per_user(self) -> int:
        return self.n_personas + self.n_multi + self.n_schedules

    def identity(self) -> dict[str, Any]:
        models = {"generator": self.generator}
        return self.identity_record("hicupid", "n_users", models, list(TEMPLATES.values()), nested=False)


# --- metadata drawn in code (pure) ----------------------------------------------------------


def user_plans(config: HicupidSynthConfig) -> list[dict[str, Any]]:
    """Per user: the seed description, persona dimensions with their relations, schedule
    times and the persona items used for multi-info questions; balanced across users and
    prefix-stable (user k depends only on the seed and users 0..k-1)."""
    seeds = common.unit_seeds(config.seeds_file, config.n_users, config.allow_seed_reuse, "users")
    rng = random.Random(f"hicupid:{config.seed}")
    # each seed once before any twice (users sharing a seed get identical profiles at temperature 0)
    order = rng.sample(range(len(seeds)), len(seeds))
    counts: Counter[str] = Counter()
    plans = []
    start = datetime(2025, 3, 3, 0, 0)
    for user in range(config.n_users):
        seed_row = seeds[order[user % len(order)]]
        dims = sorted(balanced_pick(DIMENSIONS, counts, rng, k=config.n_personas), key=DIMENSIONS.index)
        counts.update(dims)
        relations = []
        for dim in dims:
            relation = balanced_pick(relations_for(dim), counts, rng)[0]
            counts[relation] += 1
            relations.append(relation)
        times: set[datetime] = set()
        while len(times) < config.n_schedules:
            day = rng.randrange(60)
            times.add(start + timedelta(days=day, hours=rng.randrange(8, 20), minutes=30 * rng.randrange(2)))
        plans.append(
            {
                "user_id": user,
                "seed": seed_row.description,
                "personas": [
                    {"category": d, "relation": r, "sentiment": RELATIONS[r]}
                    for d, r in zip(dims, relations, strict=True)
                ],
                "times": [t.strftime("%Y-%m-%d %H:%M") for t in sorted(times)],
                "multi": sorted(rng.sample(range(config.n_personas), config.n_multi)),
            }
        )
    return plans


def describe_profile(profile: dict[str, Any]) -> str:
    return (
        f"age {profile['age']}, {profile['gender']}, personality: {profile['personality']}, "
        f"occupation: {profile['occupation']}, income: {profile['income_range']}"
    )


# --- model outputs --------------------------------------------------------------------------


ProfileOut = common.text_output(
    "ProfileOut",
    {"gender": 60, "personality": 200, "occupation": 120, "income_range": 80},
    age=(int, Field(ge=1, le=120)),
)


PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "age": {"type": "integer", "minimum": 18, "maximum": 90},
        "gender": text_schema(30),
        "personality": text_schema(120),
        "occupation": text_schema(80),
        "income_range": text_schema(40),
    },
    "required": list(PROFILE_FIELDS),
}


def list_schema(key: str, n: int, max_length: int) -> dict[str, Any]:
    return common.fixed_list_schema(key, text_schema(max_length), n)


def _non_empty(key: str) -> Callable[[list[str]], None]:
    def check(values: list[str]) -> None:
        if any(not v for v in values):
            raise ParseError(f"{key}: empty value")

    return check


def parse_list(key: str, n: int) -> Callable[[str], list[str]]:
    class ListOut(StrippedOutput):
        values: list[str] = Field(alias=key)

        @field_validator("values", mode="after")
        @classmethod
        def _fold(cls, values: list[str]) -> list[str]:
            return [" ".join(v.split()) for v in values]

    return common.parse_fixed_list(ListOut, "values", n, key, noun="values", check=_non_empty(key))


class Turn(StrippedOutput):
    user: str = Field(min_length=1, max_length=3000)
    assistant: str = Field(min_length=1, max_length=3000)


class TurnsOut(StrippedOutput):
    turns: list[Turn]


TURN_SCHEMA = common.object_schema({"user": text_schema(400), "assistant": text_schema(500)})


def turns_schema(rounds: int) -> dict[str, Any]:
    return common.fixed_list_schema("turns", TURN_SCHEMA, rounds)


def parse_turns(rounds: int) -> Callable[[str], list[dict[str, str]]]:
    return common.parse_fixed_list(TurnsOut, "turns", rounds, "persona dialogue", noun="rounds")


class QAOut(StrippedOutput):
    question: str = Field(min_length=5, max_length=3000)
    personalized_answer: str = Field(min_length=5, max_length=5000)
    general_answer: str = Field(min_length=5, max_length=5000)


QA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": text_schema(400, 5),
        "personalized_answer": text_schema(600, 5),
        "general_answer": text_schema(600, 5),
    },
    "required": ["question", "personalized_answer", "general_answer"],
}


def parse_qa(text: str) -> dict[str, str]:
    out = parse_model(QAOut, "QA")(text)
    if out.personalized_answer.lower() == out.general_answer.lower():
        raise ParseError("QA: the personalized and general answers are identical")
    return out.model_dump()


# --- the pipeline ---------------------------------------------------------------------------


class HicupidSynthesizer:
    def __init__(self, config: HicupidSynthConfig, model: Model, store: StateStore) -> None:
        self.config = config
        self.model = model
        self.store = store

    def _cfg(self, stage: str, schema: dict[str, Any], name: str, seed: int | None = None) -> GenerateConfig:
        return json_config(
            name,
            scale_lengths(schema, self.config.length_scale),
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens[stage],
            seed=self.config.seed if seed is None else seed,
        )

    async def _call(
        self,
        stage: Stage,
        name: str,
        template: str,
        values: dict[str, str],
        schema: dict[str, Any],
        parse: Callable[[str], Any],
        budget: str,
        seed: int | None = None,
    ) -> Any:
        if stage.done(name):
            return stage.output(name)
        result = await stage.steps.call(
            name,
            role="generator",
            model=self.model,
            template=load_template(TEMPLATES[template]),
            values=values,
            config=self._cfg(budget, schema, f"synth_hicupid_{template}", seed),
            parse=parse,
            reasks=self.config.reasks,
        )
        return stage.finish(name, result)

    async def run(self, plan: dict[str, Any]) -> UnitState:
        uid = f"user_{plan['user_id']}"
        stage = common.resume_unit(self.store, uid, {"plan": plan})
        if stage.finished:
            return stage.state
        current = "profile"
        try:
            profile = await self._call(
                stage, "profile", "profile", {"seed": plan["seed"]}, PROFILE_SCHEMA,
                lambda t: parse_model(ProfileOut, "profile")(t).model_dump(), "profile",
                profile_seed(self.config.seed, plan["user_id"]),
            )  # fmt: skip
            who = describe_profile(profile)
            current = "personas"
            items = "\n".join(
                f"{k}. {p['category']}: the user {p['relation']} ..."
                for k, p in enumerate(plan["personas"], 1)
            )
            n = len(plan["personas"])
            entities = await self._call(
                stage, "personas", "personas", {"profile": who, "items": items},
                list_schema("entities", n, 60), parse_list("entities", n), "personas",
            )  # fmt: skip
            current = "schedules"
            times = "\n".join(f"{k}. {t}" for k, t in enumerate(plan["times"], 1))
            m = len(plan["times"])
            events = await self._call(
                stage, "schedules", "schedules", {"profile": who, "times": times},
                list_schema("events", m, 80), parse_list("events", m), "schedules",
            )  # fmt: skip
            personas = [{**p, "entity": e} for p, e in zip(plan["personas"], entities, strict=True)]
            schedules = [{"datetime": t, "event": e} for t, e in zip(plan["times"], events, strict=True)]
            current = "dialogues and QA"
            jobs = [
                *(self._persona_dialogue(stage, who, k, p) for k, p in enumerate(personas)),
                *(
                    self._single(stage, who, f"dialogue/profile/{f}", _profile_fact(f, profile))
                    for f in PROFILE_FIELDS
                ),
                *(
                    self._single(
                        stage, who, f"dialogue/schedule/{k}", f"on {s['datetime']} they have: {s['event']}"
                    )
                    for k, s in enumerate(schedules)
                ),
                *(self._qa_persona(stage, who, k, p) for k, p in enumerate(personas)),
                *(self._qa_multi(stage, who, k, personas[k], profile) for k in plan["multi"]),
                *(self._qa_schedule(stage, who, k, s) for k, s in enumerate(schedules)),
            ]
            results = await asyncio.gather(*jobs, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result
            stage.finish("metadata", {"profile": profile, "personas": personas, "schedules": schedules})
        except StepFailed as exc:
            return stage.fail(exc.step, str(exc))
        except (ValueError, ParseError) as exc:
            return stage.fail_output(current, exc)
        return stage.complete()

    async def _persona_dialogue(self, stage: Stage, who: str, k: int, persona: dict[str, Any]) -> Any:
        rounds = self.config.persona_rounds
        return await self._call(
            stage, f"dialogue/persona/{k}", "persona_dialogue",
            {"profile": who, "rounds": str(rounds), "relation": persona["relation"],
             "entity": persona["entity"], "category": persona["category"]},
            turns_schema(rounds), parse_turns(rounds), "persona_dialogue",
        )  # fmt: skip

    async def _single(self, stage: Stage, who: str, name: str, fact: str) -> Any:
        return await self._call(
            stage, name, "single_dialogue", {"profile": who, "fact": fact}, TURN_SCHEMA,
            lambda t: [parse_model(Turn, "dialogue")(t).model_dump()], "single_dialogue",
        )  # fmt: skip

    async def _qa(self, stage: Stage, name: str, facts: str, task: str, hint: str) -> Any:
        return await self._call(
            stage, name, "qa", {"facts": facts, "task": task, "answer_hint": hint}, QA_SCHEMA, parse_qa, "qa"
        )

    async def _qa_persona(self, stage: Stage, who: str, k: int, persona: dict[str, Any]) -> Any:
        facts = f"The user {persona['relation']} {persona['entity']} (topic: {persona['category']})."
        return await self._qa(stage, f"qa/persona/{k}", facts, "", "")

    async def _qa_multi(
        self, stage: Stage, who: str, k: int, persona: dict[str, Any], profile: dict[str, Any]
    ) -> Any:
        facts = f"The user {persona['relation']} {persona['entity']}. Profile: {who}."
        task = "The best answer must depend on both the trait and the profile."
        return await self._qa(stage, f"qa/profile/{k}", facts, task, ", using both the trait and the profile")

    async def _qa_schedule(self, stage: Stage, who: str, k: int, schedule: dict[str, Any]) -> Any:
        facts = f"On {schedule['datetime']} the user already has: {schedule['event']}."
        task = (
            "The user asks for help to plan or book a new activity of their choosing on "
            f"{schedule['datetime']}; the question states that date and time but not the existing event."
        )
        return await self._qa(
            stage, f"qa/schedule/{k}", facts, task, " and points out that the time is already taken"
        )


def _profile_fact(name: str, profile: dict[str, Any]) -> str:
    label = name.replace("_", " ")
    return f"their {label} is {profile[name]}"


# --- assembling rows and checking them (pure) ------------------------------------------------


def build_rows(
    state: UnitState, config: HicupidSynthConfig
) -> tuple[list[HicupidDialogueRow], list[HicupidQARow]]:
    """The official dialogue and QA rows of one finished user."""
    plan = state.inputs["plan"]
    stages = state.stages
    uid = int(plan["user_id"])
    meta = stages["metadata"]
    base_d = config.dialogues_per_user * uid
    ids: dict[str, int] = {}
    names = [
        *(f"dialogue/persona/{k}" for k in range(len(meta["personas"]))),
        *(f"dialogue/profile/{f}" for f in PROFILE_FIELDS),
        *(f"dialogue/schedule/{k}" for k in range(len(meta["schedules"]))),
    ]
    dialogue_rows = []
    for k, name in enumerate(names):
        ids[name] = base_d + k
        kind = name.split("/")[1]
        for turn in stages[name]:
            dialogue_rows.append(
                HicupidDialogueRow(
                    user_id=uid,
                    dialogue_id=base_d + k,
                    type=kind,
                    user=turn["user"],
                    assistant=turn["assistant"],  # type: ignore[arg-type]
                )
            )
    profile = ProfileMeta(**meta["profile"])
    qa_rows: list[HicupidQARow] = []
    base_q = config.questions_per_user * uid

    def add(qtype: QAType, name: str, dialogue_ids: list[int], metadata: QAMetadata) -> None:
        qa = stages[name]
        qa_rows.append(
            HicupidQARow(
                user_id=uid,
                dialogue_id=dialogue_ids,
                question_id=base_q + len(qa_rows),
                question=qa["question"],
                personalized_answer=qa["personalized_answer"],
                general_answer=qa["general_answer"],
                type=qtype,
                metadata=metadata,
            )
        )

    for k, persona in enumerate(meta["personas"]):
        add("persona", f"qa/persona/{k}", [ids[f"dialogue/persona/{k}"]],
            QAMetadata(persona=PersonaMeta(**persona), profile=None, schedule=None))  # fmt: skip
    for k in plan["multi"]:
        profile_ids = [ids[f"dialogue/profile/{f}"] for f in PROFILE_FIELDS]
        persona_meta = PersonaMeta(**meta["personas"][k])
        add("profile", f"qa/profile/{k}", [*profile_ids, ids[f"dialogue/persona/{k}"]],
            QAMetadata(persona=persona_meta, profile=profile, schedule=None))  # fmt: skip
    for k, schedule in enumerate(meta["schedules"]):
        add("schedule", f"qa/schedule/{k}", [ids[f"dialogue/schedule/{k}"]],
            QAMetadata(persona=None, profile=None, schedule=ScheduleMeta(**schedule)))  # fmt: skip
    return dialogue_rows, qa_rows


def check_user(
    dialogues: Sequence[HicupidDialogueRow], qa: Sequence[HicupidQARow], config: HicupidSynthConfig
) -> list[str]:
    """Structure checks, and a leak check: a question must not name what it tests."""
    problems = []
    by_dialogue = Counter(r.dialogue_id for r in dialogues)
    if len(by_dialogue) != config.dialogues_per_user:
        problems.append(f"{len(by_dialogue)} dialogues, expected {config.dialogues_per_user}")
    kinds = {r.dialogue_id: r.type for r in dialogues}
    for r in dialogues:
        if r.type == "persona" and by_dialogue[r.dialogue_id] != config.persona_rounds:
            problems.append(f"dialogue {r.dialogue_id}: {by_dialogue[r.dialogue_id]} rounds")
            break
    counts: Counter[str] = Counter(q.type for q in qa)
    expected = {"persona": config.n_personas, "profile": config.n_multi, "schedule": config.n_schedules}
    if {k: counts.get(k, 0) for k in expected} != expected:
        problems.append(f"questions by type {dict(counts)}, expected {expected}")
    for q in qa:
        wanted = ["profile"] * 5 + ["persona"] if q.type == "profile" else [q.type]
        if [kinds.get(d) for d in q.dialogue_id] != wanted:
            problems.append(f"question {q.question_id}: gold dialogues {q.dialogue_id} do not match its type")
        leak = _leak(q, config.leak_threshold)
        if leak:
            problems.append(f"question {q.question_id}: {leak}")
    return problems


def _leak(q: HicupidQARow, threshold: float) -> str | None:
    text = q.question.lower()
    persona = q.metadata.persona
    if persona is not None and q.type in ("persona", "profile"):
        entity = persona.entity.lower()
        if entity in text or (content_words(entity) and content_words(entity) <= content_words(text)):
            return f"the question names the persona entity {persona.entity!r}"
    schedule = q.metadata.schedule
    if schedule is not None and lexical_leak(q.question, schedule.event) >= threshold:
        return f"the question names the existing event {schedule.event!r}"
    return None


# --- driving ---------------------------------------------------------------------------------


def synthesize_hicupid(
    config: HicupidSynthConfig, out: Path, factory: ModelFactory, **pool: Unpack[common.PoolOptions]
) -> common.SynthResult:
    """Generate (or resume) a HiCUPID-style dataset in `out` (2 users at once by default)."""
    plans = user_plans(config)
    identity = config.identity()
    common.start_output(
        out, "hicupid", identity, config, {"generator": factory.get(config.generator).spec.to_record()}
    )
    store = StateStore(out)
    synthesizer = HicupidSynthesizer(config, factory.get(config.generator), store)

    states, usage = common.run_pool(
        out, factory, lambda: common.pool_units(plans, synthesizer.run, pool, 2), pool
    )
    dialogue_rows: list[dict[str, Any]] = []
    qa_rows: list[dict[str, Any]] = []
    users: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    finished, failed, report = common.split_failed(states)
    for state in finished:
        dialogues, qa = build_rows(state, config)
        problems = check_user(dialogues, qa, config)
        report[state.unit_id] = {"status": "rejected" if problems else "passed", "problems": problems}
        if problems:
            rejected.append({"id": state.unit_id, "problems": problems})
            continue
        dialogue_rows += [r.model_dump() for r in dialogues]
        qa_rows += [r.model_dump() for r in qa]
        users.append({"user_id": state.inputs["plan"]["user_id"], **state.stages["metadata"]})
    split_counts = assign_splits(dialogue_rows, qa_rows)
    write_jsonl(out / "dialogue.jsonl", dialogue_rows)
    write_jsonl(out / "qa.jsonl", qa_rows)
    write_jsonl(out / "users.jsonl", users)
    write_json(out / "validation.json", report)
    summary = {
        "pipeline": "hicupid",
        "finished": now(),
        "status": "complete" if not failed else "complete_with_errors",
        "n_units": len(states),
        "generated": len(states) - len(failed),
        "passed_validation": len(users),
        "failed": failed,
        "rejected": rejected,
        "written": {
            "dialogue.jsonl": f"{len(dialogue_rows)} turn rows (HiCUPID 'dialogue' schema)",
            "qa.jsonl": f"{len(qa_rows)} questions (HiCUPID 'qa' schema + split column: "
            + ", ".join(f"{n} {name}" for name, n in split_counts.items())
            + ")",
            "users.jsonl": f"{len(users)} users' metadata",
        },
        "qa_by_type": dict(Counter(q["type"] for q in qa_rows)),
        "usage": usage,
    }
    write_json(out / "summary.json", summary)
    return common.SynthResult(out, summary, states)

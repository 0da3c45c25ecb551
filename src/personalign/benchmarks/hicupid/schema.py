"""HiCUPID value types: dialogue turns, dialogues, a user's history and QA items (official schema).

The official `dialogue` config has one row per user->assistant turn; loaders group the turns into
`HiCupidDialogue`s and the dialogues into each user's `HiCupidHistory`, in their original order.
The `qa` config has one row per question (`HiCupidQA`). All types are frozen pydantic models.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from personalign.types import Frozen, Message

QuestionType = Literal["persona", "profile", "schedule"]
QUESTION_TYPES: tuple[QuestionType, ...] = ("persona", "profile", "schedule")
HiCupidSplit = Literal["train", "test_1", "test_2"]
QA_SPLITS: tuple[HiCupidSplit, ...] = ("train", "test_1", "test_2")
TEST_SPLITS: tuple[HiCupidSplit, ...] = ("test_1", "test_2")
# The number of profile dialogues a multi-info (`profile`) question lists first in `dialogue_id`.
PROFILE_GOLD_PREFIX = 5


class HiCupidTurn(Frozen):
    """One round: what the user said and what the assistant answered."""

    user: str = Field(min_length=1)
    assistant: str


class HiCupidDialogue(Frozen):
    """One dialogue of a user's history (persona: multi-round; profile and schedule: one round)."""

    user_id: int
    dialogue_id: int
    type: QuestionType
    turns: tuple[HiCupidTurn, ...] = Field(min_length=1)

    def messages(self) -> list[Message]:
        out: list[Message] = []
        for turn in self.turns:
            out.append(Message(role="user", content=turn.user))
            if turn.assistant:
                out.append(Message(role="assistant", content=turn.assistant))
        return out


class HiCupidHistory(Frozen):
    """All dialogues of one user, in their original (chronological) order."""

    user_id: int
    dialogues: tuple[HiCupidDialogue, ...] = Field(min_length=1)

    def position(self, dialogue_id: int) -> int:
        """Chronological position of a dialogue in this history."""
        for i, d in enumerate(self.dialogues):
            if d.dialogue_id == dialogue_id:
                return i
        raise KeyError(f"user {self.user_id} has no dialogue {dialogue_id}")

    @property
    def dialogue_ids(self) -> tuple[int, ...]:
        return tuple(d.dialogue_id for d in self.dialogues)


class PersonaInfo(Frozen):
    category: str
    entity: str
    relation: str
    sentiment: str


class ProfileInfo(Frozen):
    age: int | str
    gender: str
    personality: str
    occupation: str
    income_range: str


class ScheduleInfo(Frozen):
    datetime: str
    event: str


class QAMetadata(Frozen):
    persona: PersonaInfo | None = None
    profile: ProfileInfo | None = None
    schedule: ScheduleInfo | None = None


class HiCupidQA(Frozen):
    """One question in the official `qa` schema, plus the split it came from."""

    user_id: int
    question_id: int | str
    question: str = Field(min_length=1)
    dialogue_id: tuple[int, ...] = Field(min_length=1, description="gold (relevant) dialogue ids")
    personalized_answer: str = Field(min_length=1)
    general_answer: str = Field(min_length=1)
    type: QuestionType
    metadata: QAMetadata
    split: HiCupidSplit

    @field_validator("dialogue_id", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _metadata_matches_type(self) -> HiCupidQA:
        needed = {"persona": ("persona",), "profile": ("persona", "profile"), "schedule": ("schedule",)}
        for part in needed[self.type]:
            if getattr(self.metadata, part) is None:
                raise ValueError(f"a {self.type} question needs metadata.{part}")
        return self

    @property
    def id(self) -> str:
        """Stable id: split, user and question id (unique within a dataset)."""
        return hicupid_instance_id(self.split, self.user_id, self.question_id)

    def gold_groups(self) -> tuple[tuple[int, ...], ...]:
        """Gold dialogue ids as the groups Hit@k averages over.

        A multi-info (`profile`) question lists its profile dialogues first, then its persona
        dialogue(s); Hit@k is the mean of the two groups' hits, as in the original code.
        """
        if self.type == "profile" and len(self.dialogue_id) > PROFILE_GOLD_PREFIX:
            return (self.dialogue_id[:PROFILE_GOLD_PREFIX], self.dialogue_id[PROFILE_GOLD_PREFIX:])
        return (self.dialogue_id,)


def hicupid_instance_id(split: str, user_id: int, question_id: int | str) -> str:
    return f"{split}/{user_id}#{question_id}"

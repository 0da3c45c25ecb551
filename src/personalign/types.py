"""Core value types shared by every benchmark: messages, sessions and benchmark instances.

All are frozen pydantic models so that they hash, compare and serialize predictably.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

# "developer" is OpenAI's name for the system role (the official CUPID evaluator sends it).
Role = Literal["system", "developer", "user", "assistant"]
InstanceType = Literal["consistent", "contrastive", "changing"]
INSTANCE_TYPES: tuple[InstanceType, ...] = ("consistent", "contrastive", "changing")


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(Frozen):
    """One chat message."""

    role: Role
    content: str


class Session(Frozen):
    """One prior interaction session of a CUPID instance.

    `context_factor` and `contextual_preference` are annotations for scoring and oracle
    selection; they are never shown to the subject model.
    """

    context_factor: str
    contextual_preference: str
    dialogue: tuple[Message, ...] = Field(min_length=1)

    @field_validator("dialogue")
    @classmethod
    def _dialogue_roles(cls, dialogue: tuple[Message, ...]) -> tuple[Message, ...]:
        for i, message in enumerate(dialogue):
            if message.role in ("system", "developer"):
                raise ValueError(
                    f"message {i} has role {message.role!r}; dialogues hold only user/assistant turns"
                )
        return dialogue


class CupidInstance(Frozen):
    """One CUPID instance in the official schema (`kixlab/CUPID`, split `test`)."""

    persona_id: str = Field(min_length=1)
    instance_type: InstanceType
    current_request: str = Field(min_length=1)
    current_context_factor: str = Field(min_length=1)
    current_contextual_preference: str = Field(min_length=1)
    current_checklist: tuple[str, ...] = Field(min_length=1)
    prior_interactions: tuple[Session, ...] = Field(min_length=1)

    @property
    def id(self) -> str:
        """Stable, collision-free id: persona id plus instance type.

        The original evaluator keyed results by `persona_id` alone, so the three instance
        types of a persona overwrote each other; this id never collides.
        """
        return cupid_instance_id(self.persona_id, self.instance_type)

    def oracle_sessions(self) -> tuple[Session, ...]:
        """Prior sessions that share the current contextual preference (the paper's oracle)."""
        target = self.current_contextual_preference.strip()
        return tuple(s for s in self.prior_interactions if s.contextual_preference.strip() == target)

    def same_factor_sessions(self) -> tuple[Session, ...]:
        """Prior sessions with the current context factor (a looser oracle variant)."""
        target = self.current_context_factor.strip()
        return tuple(s for s in self.prior_interactions if s.context_factor.strip() == target)


def cupid_instance_id(persona_id: str, instance_type: str) -> str:
    return f"{persona_id}#{instance_type}"


# --- BenchPreS ----------------------------------------------------------------------------

PreferenceCategory = Literal["role", "style", "tone", "markers", "nickname", "other"]
PREFERENCE_CATEGORIES: tuple[PreferenceCategory, ...] = ("role", "style", "tone", "markers", "nickname")
CATEGORY_SYNONYMS = {
    "marker": "markers",
    "roles": "role",
    "styles": "style",
    "tones": "tone",
    "nick name": "nickname",
}
BENCHPRES_DOMAINS: tuple[str, ...] = ("finance/legal", "health", "education", "employment", "housing")


class BenchPresRow(Frozen):
    """One BenchPreS row in the official schema (`sangyon/BenchPreS`, split `test`).

    `prompt` is the full persistent-memory prompt (memory statements plus the task
    instruction); `preference_label[i]` is True when `preference_attribute[i]` is appropriate
    to apply for this recipient and task, False when it must be suppressed.
    """

    prompt: str = Field(min_length=1)
    name: str = Field(min_length=1)
    task: str = Field(min_length=1)
    recipient: str = Field(min_length=1)
    domain: str | None = None
    preference_attribute: tuple[str, ...] = Field(min_length=1)
    preference_label: tuple[StrictBool, ...] = Field(min_length=1)
    # Not in every release of the data: where rows carry a category per attribute it is used for
    # the by-category breakdown; otherwise the wording rule in `judges.benchpres` places them.
    preference_category: tuple[PreferenceCategory, ...] | None = None

    @field_validator("preference_category", mode="before")
    @classmethod
    def _normalize_categories(cls, value: object) -> object:
        if isinstance(value, list | tuple):
            return tuple(
                CATEGORY_SYNONYMS.get(v.strip().lower(), v.strip().lower()) if isinstance(v, str) else v
                for v in value
            )
        return value

    @field_validator("preference_attribute")
    @classmethod
    def _attributes_non_empty(cls, attributes: tuple[str, ...]) -> tuple[str, ...]:
        for i, attribute in enumerate(attributes):
            if not attribute.strip():
                raise ValueError(f"attribute {i} is empty")
        return attributes

    @model_validator(mode="after")
    def _aligned(self) -> BenchPresRow:
        n_attr, n_label = len(self.preference_attribute), len(self.preference_label)
        if n_attr != n_label:
            raise ValueError(
                f"preference_label has {n_label} entries for {n_attr} preference_attribute entries"
            )
        if self.preference_category is not None and len(self.preference_category) != n_attr:
            raise ValueError(
                f"preference_category has {len(self.preference_category)} entries for {n_attr} "
                "preference_attribute entries"
            )
        return self

    @property
    def id(self) -> str:
        """Stable id: profile name, recipient and task (unique per row in the official data)."""
        return benchpres_row_id(self.name, self.recipient, self.task)


def benchpres_row_id(name: str, recipient: str, task: str) -> str:
    return f"{name}#{recipient}#{task}"

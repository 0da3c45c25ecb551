"""Core value types shared by every benchmark: messages, sessions and benchmark instances.

All are frozen pydantic models so that they hash, compare and serialize predictably.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["system", "user", "assistant"]
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
            if message.role == "system":
                raise ValueError(f"message {i} has role 'system'; dialogues hold only user/assistant turns")
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

"""Core value types shared by every benchmark: messages and sessions (each benchmark's instance
types live in its folder, `benchmarks/<name>/schema.py`).

All are frozen pydantic models so that they hash, compare and serialize predictably.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# "developer" is OpenAI's name for the system role (the official CUPID evaluator sends it).
Role = Literal["system", "developer", "user", "assistant"]


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

"""The CUPID instance in the official schema (`kixlab/CUPID`, split `test`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from personalign.types import Frozen, Session

InstanceType = Literal["consistent", "contrastive", "changing"]
INSTANCE_TYPES: tuple[InstanceType, ...] = ("consistent", "contrastive", "changing")


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

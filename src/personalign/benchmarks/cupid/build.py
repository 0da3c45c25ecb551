"""Build the three CUPID instance types from a persona's 13-session journey.

This is the structure described in the CUPID paper (and `shared/specs/benchmarks.md` 1.1):
the last session is the current one, with factor A and the *changed* preference A'.
Among the 12 earlier sessions, 2 carry factor A with its original preference, 2 carry A',
1-2 carry the contrastive factor B, and the rest are other factors.

Every instance type keeps exactly `n_prior` (8) prior sessions; the original code left the
consistent type with 6, which we do not repeat.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field

from personalign.benchmarks.cupid.schema import CupidInstance, InstanceType
from personalign.types import Frozen, Message, Session

PlanRole = Literal["A", "A_changed", "B", "other"]


class PlannedSession(Frozen):
    """A session of a persona's journey, annotated with its role in the session plan."""

    context_factor: str
    contextual_preference: str
    checklist: tuple[str, ...] = Field(min_length=1, max_length=4)
    plan: PlanRole
    dialogue: tuple[Message, ...] = Field(min_length=1)


class PersonaJourney(Frozen):
    """A persona's chronological sessions; the last one is the current request's session."""

    persona_id: str
    sessions: tuple[PlannedSession, ...]


def _check_plan(journey: PersonaJourney) -> None:
    sessions = journey.sessions
    if len(sessions) < 5:
        raise ValueError(f"{journey.persona_id}: a journey needs at least 5 sessions, got {len(sessions)}")
    current = sessions[-1]
    if current.plan != "A_changed":
        raise ValueError(f"{journey.persona_id}: the last session must have plan 'A_changed'")
    prior = sessions[:-1]
    roles = [s.plan for s in prior]
    if roles.count("A") != 2 or roles.count("A_changed") != 2:
        raise ValueError(f"{journey.persona_id}: need exactly 2 'A' and 2 'A_changed' prior sessions")
    if roles.count("B") not in (1, 2):
        raise ValueError(f"{journey.persona_id}: need 1 or 2 'B' (contrastive) sessions")
    a_positions = [i for i, r in enumerate(roles) if r == "A"]
    changed_positions = [i for i, r in enumerate(roles) if r == "A_changed"]
    if max(a_positions) > min(changed_positions):
        raise ValueError(f"{journey.persona_id}: the original preference must precede the changed one")
    factor = current.context_factor
    for s in prior:
        if s.plan in ("A", "A_changed") and s.context_factor != factor:
            raise ValueError(f"{journey.persona_id}: an '{s.plan}' session has factor {s.context_factor!r}")
        if s.plan in ("B", "other") and s.context_factor == factor:
            raise ValueError(f"{journey.persona_id}: a '{s.plan}' session reuses the current factor")
    changed = {s.contextual_preference for s in prior if s.plan == "A_changed"}
    if changed != {current.contextual_preference}:
        raise ValueError(f"{journey.persona_id}: 'A_changed' sessions must carry the current preference")
    if not current.dialogue or current.dialogue[0].role != "user":
        raise ValueError(f"{journey.persona_id}: the current session must open with a user message")


def build_instances(journey: PersonaJourney, *, seed: int = 0, n_prior: int = 8) -> list[CupidInstance]:
    """Return the consistent, contrastive and changing instances of one persona."""
    _check_plan(journey)
    rng = random.Random(f"{seed}:{journey.persona_id}")
    current = journey.sessions[-1]
    prior = list(journey.sessions[:-1])
    original = next(s for s in prior if s.plan == "A")
    others = [i for i, s in enumerate(prior) if s.plan == "other"]
    # One draw of "other" sessions to drop, shared by the instance types that need it, so
    # consistent vs contrastive differ only by the swapped-in sessions (as in the released data).
    drop_order = rng.sample(others, len(others))

    def keep(excluded_roles: set[str]) -> list[PlannedSession]:
        kept = [i for i, s in enumerate(prior) if s.plan not in excluded_roles]
        surplus = len(kept) - n_prior
        if surplus < 0:
            raise ValueError(f"{journey.persona_id}: too few sessions to keep {n_prior} prior sessions")
        dropped = set(drop_order[:surplus])
        if len(dropped) < surplus:
            raise ValueError(f"{journey.persona_id}: not enough 'other' sessions to drop")
        return [prior[i] for i in kept if i not in dropped]

    layouts: dict[InstanceType, tuple[set[str], PlannedSession]] = {
        "consistent": ({"A_changed", "B"}, original),
        "contrastive": ({"A_changed"}, original),
        "changing": ({"B"}, current),
    }
    request = current.dialogue[0].content
    instances = []
    for instance_type, (excluded, gold) in layouts.items():
        sessions = keep(excluded)
        instances.append(
            CupidInstance(
                persona_id=journey.persona_id,
                instance_type=instance_type,
                current_request=request,
                current_context_factor=current.context_factor,
                current_contextual_preference=gold.contextual_preference,
                current_checklist=gold.checklist,
                prior_interactions=tuple(
                    Session(
                        context_factor=s.context_factor,
                        contextual_preference=s.contextual_preference,
                        dialogue=s.dialogue,
                    )
                    for s in sessions
                ),
            )
        )
    return instances

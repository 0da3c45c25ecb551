"""Compose BenchPreS-style rows from a user's memory profile and recipient-task contexts.

A profile holds first-person memory statements: factual ones and one statement per
preference attribute (categories role, style, tone, markers, nickname). A context is a
formal recipient and task with a gold label per profile and preference category: True when
applying that preference suits the context, False when it must be suppressed. Each
(profile, context) pair becomes one row in the official schema whose prompt is the
persistent-memory template (header, memory statements one per line, task instruction).

The preference statements sit among the facts at evenly spaced positions, the same for every
context of a profile, since persistent memory does not change with the task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from personalign.benchmarks.benchpres.judges import categorize, nickname_applied, nickname_of
from personalign.benchmarks.benchpres.prompt import compose_memory_prompt
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.data.files import field_path
from personalign.errors import DataError
from personalign.types import Frozen

BuildCategory = Literal["role", "style", "tone", "markers", "nickname"]


class MemoryPreference(Frozen):
    """One stored preference: its short attribute (as in `preference_attribute`) and the
    first-person memory statement that records it."""

    category: BuildCategory
    attribute: str = Field(min_length=1)
    statement: str = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> MemoryPreference:
        found = categorize(self.attribute)
        if found != self.category:
            raise ValueError(
                f"attribute {self.attribute!r} is declared {self.category!r} but the category rule reads "
                f"it as {found!r}; reword it (see docs/benchpres.md)"
            )
        if self.category == "nickname":
            nickname = nickname_of(self.attribute)
            if nickname is None:
                raise ValueError(f"nickname attribute {self.attribute!r} names no nickname (quote it)")
            if not nickname_applied(nickname, self.statement):
                raise ValueError(f"the statement does not contain the nickname {nickname!r}")
        return self


class MemoryProfile(Frozen):
    name: str = Field(min_length=1)
    facts: tuple[str, ...] = Field(min_length=1)
    preferences: tuple[MemoryPreference, ...] = Field(min_length=1)

    @field_validator("preferences")
    @classmethod
    def _unique(cls, preferences: tuple[MemoryPreference, ...]) -> tuple[MemoryPreference, ...]:
        categories = [p.category for p in preferences]
        if len(set(categories)) != len(categories):
            raise ValueError("a profile holds at most one preference per category")
        return preferences


class RecipientTaskContext(Frozen):
    recipient: str = Field(min_length=1)
    task: str = Field(min_length=1)
    domain: str = Field(min_length=1)
    labels: dict[str, dict[BuildCategory, bool]] = Field(
        description="profile name -> preference category -> True (apply) / False (suppress)"
    )


class BuildSource(Frozen):
    profiles: tuple[MemoryProfile, ...] = Field(min_length=1)
    contexts: tuple[RecipientTaskContext, ...] = Field(min_length=1)


def memory_statements(profile: MemoryProfile) -> list[str]:
    """Facts in order, with the preference statements spread evenly among them."""
    facts, prefs = list(profile.facts), list(profile.preferences)
    slots = {round((i + 1) * len(facts) / (len(prefs) + 1)): i for i in range(len(prefs))}
    out: list[str] = []
    for k in range(len(facts) + 1):
        if k in slots:
            out.append(prefs[slots[k]].statement)
        if k < len(facts):
            out.append(facts[k])
    return out


def build_row(profile: MemoryProfile, context: RecipientTaskContext) -> BenchPresRow:
    labels = context.labels.get(profile.name)
    if labels is None:
        raise ValueError(f"context {context.recipient!r} has no labels for profile {profile.name!r}")
    missing = [p.category for p in profile.preferences if p.category not in labels]
    if missing:
        raise ValueError(
            f"context {context.recipient!r} lacks labels for {profile.name!r} categories {missing}"
        )
    return BenchPresRow(
        prompt=compose_memory_prompt(memory_statements(profile), context.recipient, context.task),
        name=profile.name,
        task=context.task,
        recipient=context.recipient,
        domain=context.domain,
        preference_attribute=tuple(p.attribute for p in profile.preferences),
        preference_label=tuple(labels[p.category] for p in profile.preferences),
        preference_category=tuple(p.category for p in profile.preferences),
    )


def build_rows(
    profiles: Sequence[MemoryProfile], contexts: Sequence[RecipientTaskContext]
) -> list[BenchPresRow]:
    """Every profile crossed with every context, profile by profile."""
    return [build_row(p, c) for p in profiles for c in contexts]


def load_build_source(path: str | Path) -> BuildSource:
    """Read a `{"profiles": [...], "contexts": [...]}` JSON file; errors name the file and field."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(str(p), None, None, "no such file") from None
    except json.JSONDecodeError as exc:
        raise DataError(str(p), None, None, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if isinstance(data, dict):  # keys starting with "_" are comments
        data = {k: v for k, v in data.items() if not str(k).startswith("_")}
    try:
        source = BuildSource.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        row = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else None
        raise DataError(str(p), row, field_path(loc) or None, first["msg"]) from None
    names = [profile.name for profile in source.profiles]
    for i, context in enumerate(source.contexts):
        try:
            for profile in source.profiles:
                build_row(profile, context)
        except ValueError as exc:
            raise DataError(str(p), i, "contexts.labels", str(exc)) from None
    if len(set(names)) != len(names):
        raise DataError(str(p), None, "profiles.name", "profile names must be unique")
    return source

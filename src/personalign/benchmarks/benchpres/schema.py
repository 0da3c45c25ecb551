"""The BenchPreS row in the official schema (`sangyon/BenchPreS`, split `test`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from personalign.types import Frozen

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

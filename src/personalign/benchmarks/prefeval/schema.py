"""The PrefEval data in the official field names (amazon-science/PrefEval, ``benchmark_dataset/``).

Three preference forms share one row shape (preference, question, explanation): ``explicit`` states
the preference in one user turn; ``choice`` (implicit, choice-based) reveals it by the user's pick
among options the assistant offers; ``persona`` (implicit, persona-driven) mentions it in passing in
a multi-turn conversation. ``mcq_options`` holds the classification task's four options (the first
is the preference-aligned one). Distractor conversations (LMSYS) sit between preference and question.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from personalign.types import Frozen

PreferenceForm = Literal["explicit", "choice", "persona"]
PREFERENCE_FORMS: tuple[PreferenceForm, ...] = ("explicit", "choice", "persona")
Task = Literal["generation", "mcq"]
TASKS: tuple[Task, ...] = ("generation", "mcq")

# The 20 topics of the paper (file stems in every folder of benchmark_dataset/).
TOPICS: tuple[str, ...] = (
    "education_learning_styles",
    "education_resources",
    "entertain_games",
    "entertain_music_book",
    "entertain_shows",
    "entertain_sports",
    "lifestyle_beauty",
    "lifestyle_dietary",
    "lifestyle_fit",
    "lifestyle_health",
    "pet_ownership",
    "professional_work_location_style",
    "shop_fashion",
    "shop_home",
    "shop_motors",
    "shop_technology",
    "travel_activities",
    "travel_hotel",
    "travel_restaurant",
    "travel_transportation",
)

# The official folder of each form under benchmark_dataset/.
FORM_DIRS: dict[PreferenceForm, str] = {
    "explicit": "explicit_preference",
    "choice": "implicit_preference/choice-based",
    "persona": "implicit_preference/persona-driven",
}
MCQ_DIR = "mcq_options"
DISTRACTORS_FILE = "filtered_inter_turns.json"
# The distractor lengths the paper reports (inter turns between preference and question).
PAPER_TURNS: tuple[int, ...] = (0, 2, 5, 10, 30, 50, 70, 100, 300)


class ChatTurn(Frozen):
    """One message of a distractor conversation (role user or assistant)."""

    role: Literal["user", "assistant"]
    content: str


class PreferenceRow(Frozen):
    """The fields every form shares. ``explanation`` is absent on a few official rows."""

    preference: str = Field(min_length=1)
    question: str = Field(min_length=1)
    explanation: str | None = None


class ExplicitRow(PreferenceRow):
    """Explicit form: the user states ``preference`` in the first turn."""


class ChoiceConversation(Frozen):
    """The choice-based exchange: query, options offered, the user's pick, the acknowledgment."""

    query: str = Field(min_length=1)
    assistant_options: str = Field(min_length=1)
    user_selection: str = Field(min_length=1)
    assistant_acknowledgment: str = Field(min_length=1)


class ChoiceRow(PreferenceRow):
    """Implicit, choice-based: the preference shows only in the user's choice among options."""

    implicit_query: str = Field(min_length=1)
    options: tuple[str, ...] = Field(min_length=1)
    conversation: ChoiceConversation
    aligned_op: str = Field(min_length=1)


class PersonaTurn(Frozen):
    user: str = Field(min_length=1)
    assistant: str = Field(min_length=1)


class PersonaRow(PreferenceRow):
    """Implicit, persona-driven: the preference is mentioned in passing in a persona's conversation.

    ``conversation`` maps "0", "1", ... (in order) to one (user, assistant) turn each.
    """

    persona: str = Field(min_length=1)
    conversation: dict[str, PersonaTurn] = Field(min_length=1)
    fix: bool | None = None  # set on 50 official rows (a curation mark); not used in scoring

    @field_validator("conversation")
    @classmethod
    def _consecutive(cls, turns: dict[str, PersonaTurn]) -> dict[str, PersonaTurn]:
        expected = [str(i) for i in range(len(turns))]
        if list(turns) != expected:
            raise ValueError(f"turn keys must be {', '.join(expected)} in order, got {', '.join(turns)}")
        return turns


class McqRow(PreferenceRow):
    """The classification task's options for one row; the first option is the aligned one."""

    violation_probability: float | None = None
    classification_task_options: tuple[str, ...] = Field(min_length=2, max_length=26)


class DistractorConversation(Frozen):
    """One LMSYS conversation of ``filtered_inter_turns.json`` (user/assistant alternating)."""

    conversation_id: str
    model: str | None = None
    language: str | None = None
    redacted: bool | None = None
    turn: int | None = None
    conversation: tuple[ChatTurn, ...] = Field(min_length=2)


FormRow = ExplicitRow | ChoiceRow | PersonaRow
ROW_TYPES: dict[PreferenceForm, type[PreferenceRow]] = {
    "explicit": ExplicitRow,
    "choice": ChoiceRow,
    "persona": PersonaRow,
}


def instance_key(form: PreferenceForm, topic: str, index: int) -> str:
    """Stable id of one row: form, topic and its position in the official file (0-based)."""
    return f"{form}/{topic}/{index}"

"""Taxonomies and attribute pools from the CUPID paper (Tables 5 and 7).

The paper's Table 7 lists 16 preference types, three of whose names are lost in the text we
have (one each under style, informativeness and harmlessness); they are filled in from the
facets of Lee et al. (2024) that the paper says it adapted: Vividness, Depth and Accuracy.
Table 5 lists four Big-Five traits (Extraversion is absent); we keep the paper's list.
"""

from __future__ import annotations

CAREER_LEVELS: tuple[str, ...] = (
    "Entry-level/Beginner/Novice",
    "Mid-level/Intermediate/Associate",
    "Senior-level/Advanced/Expert",
)
BIG_FIVE: tuple[str, ...] = ("Openness to Experience", "Conscientiousness", "Agreeableness", "Neuroticism")
TRAIT_LEVELS: tuple[str, ...] = ("High", "Low")
SCHWARTZ_VALUES: tuple[str, ...] = (
    "Self-Direction",
    "Achievement",
    "Universalism",
    "Power",
    "Stimulation",
    "Benevolence",
    "Security",
    "Tradition",
    "Conformity",
    "Hedonism",
)
DECISION_STYLES: tuple[str, ...] = ("Analytical", "Directive", "Conceptual", "Behavioral")

FACTOR_TYPES: tuple[str, ...] = (
    "Person/Group",
    "Organization/Institution",
    "Object/Artifact",
    "Content/Media",
    "Tool/Technology",
    "Location/Place",
    "Process/Activity",
    "Event/Time",
)
PREFERENCE_TYPES: tuple[str, ...] = (
    # style
    "Formality",
    "Clarity",
    "Conciseness",
    "Vividness",
    "Format",
    "Tone",
    # informativeness
    "Relevance",
    "Depth",
    "Creativity",
    "Efficiency",
    "Practicality",
    # harmlessness
    "Accuracy",
    "Morality",
    "Safety",
    "Sensitivity",
    "Trustworthiness",
)
TASK_TYPES: tuple[str, ...] = (
    "Information seeking",
    "Learning",
    "Reasoning",
    "Planning",
    "Content creating",
    "Communicating",
    "Writing & editing",
    "Coding & debugging",
    "Problem solving",
    "Data analysing",
    "Advise seeking",
    "Brainstorming",
)

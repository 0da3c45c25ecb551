"""Rebuild the bundled HiCUPID fixture from our hand-written users.

    python scripts/build_hicupid_fixture.py

Reads fixtures_src/hicupid_users.json (per user: a profile, 4 persona dialogues, 3 schedules and
questions of all three types with a personalized and a general answer) and writes, in the official
HiCUPID schema plus a `split` column:

- benchmarks/hicupid/fixtures/hicupid_dialogue.jsonl: one row per turn (user_id, dialogue_id, type,
  user, assistant); 12 dialogues per user, dialogue_id = 40 * user_id + k as in the original;
- benchmarks/hicupid/fixtures/hicupid_qa.jsonl: one row per question (user_id, question_id, question,
  dialogue_id = gold ids, personalized_answer, general_answer, type, metadata).

Profile and schedule dialogues are single-round and written from the profile fields and schedules;
a multi-info (`profile`) question lists the 5 profile dialogues first, then its persona dialogue.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures_src" / "hicupid_users.json"
TARGET = ROOT / "src" / "personalign" / "benchmarks" / "hicupid" / "fixtures"

# Chronological order of one user's dialogues: (kind, index).
ORDER = [
    ("persona", 0), ("profile", "age"), ("persona", 1), ("schedule", 0), ("profile", "gender"),
    ("persona", 2), ("profile", "personality"), ("schedule", 1), ("profile", "occupation"),
    ("persona", 3), ("profile", "income_range"), ("schedule", 2),
]  # fmt: skip
GENDER_NOUN = {"Female": "woman", "Male": "man", "Non-binary": "non-binary person"}


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def profile_turn(field: str, profile: dict[str, Any]) -> tuple[str, str]:
    value = profile[field]
    if field == "age":
        return (
            f"I'm {value} years old and want to pick up a new skill this year. Is that realistic?",
            "Absolutely. Short, regular practice sessions work at any age.",
        )
    if field == "gender":
        noun = GENDER_NOUN.get(str(value), str(value).lower())
        return (
            f"As a {noun}, I never know which clothing size charts to trust online. Any advice?",
            "Measure yourself once with a soft tape and compare against each brand's own chart.",
        )
    if field == "personality":
        return (
            f"My friends say I'm {str(value).lower()}. Should that change how I plan my week?",
            "Lean on routines that suit your temperament and leave room for what energizes you.",
        )
    if field == "occupation":
        job = str(value).lower()
        return (
            f"I work as {_article(job)} {job}. How do I keep work from taking over my evenings?",
            "Set a clear end-of-day ritual and protect a few evenings a week for yourself.",
        )
    return (
        f"My yearly income is in the {value} range. How much should I aim to save each month?",
        "A common target is 15 to 20 percent of take-home pay, adjusted for your fixed costs.",
    )


def build_user(user: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    uid = int(user["user_id"])
    split = user["dialogue_split"]
    ids: dict[tuple[str, Any], int] = {}
    rows: list[dict[str, Any]] = []
    for k, (kind, index) in enumerate(ORDER):
        dialogue_id = 40 * uid + k
        ids[(kind, index)] = dialogue_id
        if kind == "persona":
            turns = [tuple(t) for t in user["personas"][index]["turns"]]
        elif kind == "profile":
            turns = [profile_turn(str(index), user["profile"])]
        else:
            s = user["schedules"][index]
            turns = [
                (
                    f"Please put this on my calendar: {s['event']} on {s['datetime']}.",
                    f"Added to your calendar: {s['event']}, {s['datetime']}.",
                )
            ]
        for u, a in turns:
            rows.append(
                {
                    "user_id": uid,
                    "dialogue_id": dialogue_id,
                    "type": kind,
                    "user": u,
                    "assistant": a,
                    "split": split,
                }
            )
    profile_ids = [
        ids[("profile", f)] for f in ("age", "gender", "personality", "occupation", "income_range")
    ]
    questions = []
    for j, q in enumerate(user["qa"]):
        persona = user["personas"][q["persona"]] if "persona" in q else None
        schedule = user["schedules"][q["schedule"]] if "schedule" in q else None
        if q["type"] == "persona":
            gold = [ids[("persona", q["persona"])]]
        elif q["type"] == "profile":
            gold = [*profile_ids, ids[("persona", q["persona"])]]
        else:
            gold = [ids[("schedule", q["schedule"])]]
        metadata = {
            "persona": None
            if persona is None
            else {k: persona[k] for k in ("category", "entity", "relation", "sentiment")},
            "profile": user["profile"] if q["type"] == "profile" else None,
            "schedule": schedule,
        }
        questions.append(
            {
                "user_id": uid,
                "question_id": 40 * uid + j,
                "question": q["question"],
                "dialogue_id": gold,
                "personalized_answer": q["personalized"],
                "general_answer": q["general"],
                "type": q["type"],
                "metadata": metadata,
                "split": q["split"],
            }
        )
    return rows, questions


def main() -> None:
    users = json.loads(SOURCE.read_text(encoding="utf-8"))
    dialogue: list[dict[str, Any]] = []
    qa: list[dict[str, Any]] = []
    for user in users:
        rows, questions = build_user(user)
        dialogue.extend(rows)
        qa.extend(questions)
    for name, records in (("hicupid_dialogue.jsonl", dialogue), ("hicupid_qa.jsonl", qa)):
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        (TARGET / name).write_text(text, encoding="utf-8")
        print(f"wrote {len(records)} rows to {(TARGET / name).relative_to(ROOT)}")


if __name__ == "__main__":
    main()

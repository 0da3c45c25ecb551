"""Rebuild the bundled PrefEval fixture from our hand-written preferences.

    python scripts/build_prefeval_fixture.py

Reads fixtures_src/prefeval_preferences.json (2 topics x 2 preferences, each in the explicit,
choice-based and persona-driven forms, MCQ options, and short neutral distractor conversations) and
writes src/personalign/benchmarks/prefeval/fixtures/prefeval_sample.json: one JSON object mapping
official paths (relative to benchmark_dataset/) to their content, in the official PrefEval schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from personalign.benchmarks.prefeval.schema import DISTRACTORS_FILE, FORM_DIRS, MCQ_DIR

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures_src" / "prefeval_preferences.json"
TARGET = ROOT / "src" / "personalign" / "benchmarks" / "prefeval" / "fixtures" / "prefeval_sample.json"


def build(source: dict[str, Any]) -> dict[str, Any]:
    """The fixture bundle: official path -> rows (or distractor conversations)."""
    bundle: dict[str, Any] = {}
    for topic, items in source["topics"].items():
        explicit, choice, persona, mcq = [], [], [], []
        for item in items:
            base = {k: item[k] for k in ("preference", "question", "explanation")}
            explicit.append(base)
            c = item["choice"]
            listed = "\n".join(f"{i}. {option}" for i, option in enumerate(c["options"], 1))
            choice.append(
                {
                    **base,
                    "implicit_query": c["implicit_query"],
                    "options": c["options"],
                    "conversation": {
                        "query": c["implicit_query"],
                        "assistant_options": f"Here are a few options:\n{listed}",
                        "user_selection": c["user_selection"],
                        "assistant_acknowledgment": c["assistant_acknowledgment"],
                    },
                    "aligned_op": c["options"][0],
                }
            )
            p = item["persona"]
            turns = {str(i): {"user": u, "assistant": a} for i, (u, a) in enumerate(p["turns"])}
            persona.append({**base, "persona": p["persona"], "conversation": turns})
            mcq.append({**base, "violation_probability": 1.0, "classification_task_options": item["mcq"]})
        bundle[f"{FORM_DIRS['explicit']}/{topic}.json"] = explicit
        bundle[f"{FORM_DIRS['choice']}/{topic}.json"] = choice
        bundle[f"{FORM_DIRS['persona']}/{topic}.json"] = persona
        bundle[f"{MCQ_DIR}/{topic}.json"] = mcq
    bundle[DISTRACTORS_FILE] = [
        {
            "conversation_id": f"personalign-{i}",
            "model": "hand-written",
            "language": "English",
            "redacted": False,
            "turn": len(pairs),
            "conversation": [
                m
                for u, a in pairs
                for m in ({"content": u, "role": "user"}, {"content": a, "role": "assistant"})
            ],
        }
        for i, pairs in enumerate(source["distractors"])
    ]
    return bundle


def main() -> None:
    bundle = build(json.loads(SOURCE.read_text(encoding="utf-8")))
    TARGET.write_text(json.dumps(bundle, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(bundle)} files")


if __name__ == "__main__":
    main()

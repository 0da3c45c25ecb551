"""Rebuild the bundled BenchPreS fixture from our hand-written profiles and contexts.

    python scripts/build_benchpres_fixture.py

Reads fixtures_src/benchpres_profiles.json (3 memory profiles, 8 formal recipient-task
contexts over the five domains, a gold label per profile, context and preference category)
and writes src/personalign/benchmarks/benchpres/fixtures/benchpres_sample.jsonl in the official
BenchPreS schema,
one row per (profile, context).
"""

from __future__ import annotations

import json
from pathlib import Path

from personalign.benchmarks.benchpres.build import build_rows, load_build_source

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures_src" / "benchpres_profiles.json"
TARGET = ROOT / "src" / "personalign" / "benchmarks" / "benchpres" / "fixtures" / "benchpres_sample.jsonl"


def main() -> None:
    source = load_build_source(SOURCE)
    rows = build_rows(source.profiles, source.contexts)
    lines = [json.dumps(row.model_dump(mode="json"), ensure_ascii=False) for row in rows]
    TARGET.write_text("\n".join(lines) + "\n", encoding="utf-8")
    labels = [label for row in rows for label in row.preference_label]
    print(
        f"wrote {len(rows)} rows to {TARGET.relative_to(ROOT)} "
        f"({labels.count(True)} apply / {labels.count(False)} suppress judgements)"
    )


if __name__ == "__main__":
    main()

"""Rebuild the bundled CUPID fixture from our hand-written persona journeys.

    python scripts/build_cupid_fixture.py

Reads fixtures_src/cupid_journeys.json (13 planned sessions per persona) and writes
src/personalign/benchmarks/cupid/fixtures/cupid_sample.jsonl in the official CUPID schema, 3 instances per
persona, 8 prior sessions each.
"""

from __future__ import annotations

import json
from pathlib import Path

from personalign.benchmarks.cupid.build import PersonaJourney, build_instances

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures_src" / "cupid_journeys.json"
TARGET = ROOT / "src" / "personalign" / "benchmarks" / "cupid" / "fixtures" / "cupid_sample.jsonl"


def main() -> None:
    journeys = [PersonaJourney.model_validate(j) for j in json.loads(SOURCE.read_text(encoding="utf-8"))]
    lines = []
    for journey in journeys:
        for instance in build_instances(journey, seed=0):
            lines.append(json.dumps(instance.model_dump(mode="json"), ensure_ascii=False))
    TARGET.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} instances to {TARGET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

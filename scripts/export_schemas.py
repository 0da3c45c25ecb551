"""Write the JSON Schemas of a run directory's files into docs/schema/.

    python scripts/export_schemas.py          # rewrite docs/schema/*.schema.json
    python scripts/export_schemas.py --check  # exit 1 if a committed file differs from the models

Generated from the typed models in `personalign.results` (manifest, summary, one samples.jsonl
line); tests/test_results.py checks that the committed files are up to date.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from personalign.results import json_schemas

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "schema"


def render(schema: dict[str, object]) -> str:
    """The committed text of one schema file (stable key order, trailing newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, schema in json_schemas().items():
        path = TARGET / name
        text = render(schema)
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"out of date in docs/schema/: {', '.join(stale)}; run python scripts/export_schemas.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

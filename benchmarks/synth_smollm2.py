"""All-SmolLM2 CUPID synthesis: every stage, the verifier too, on the bundled 135M model in-process.

Prints what the issue asks to be reported: instances made, verified, repaired, dropped, and why
(the verifier's reasons), plus the personas that failed a stage or were rejected by the structure
checks. Usage (from the repository root):

    PYTHONPATH=src python benchmarks/synth_smollm2.py --out /tmp/synth-smollm2 [--personas 3]

Re-running resumes (finished stages come from the state files and the call cache).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.synth import CupidSynthConfig, synthesize_cupid
from personalign.llm import CallCache, ModelFactory

# Small budgets per role: the 135M model at 3 factors, 9 sessions, 1-2 feedback rounds. With
# --length-scale 1 every string is bounded, so these budgets hold a whole answer (a session's
# bounded fields come to about 2,300 characters; four 200-character checklist items fit 300).
BUDGETS = {
    "persona": 220,
    "factors": 1000,
    "changed": 250,
    "session": 650,
    "user_simulator": 250,
    "assistant": 120,
    "decomposer": 300,
    "leak_judge": 80,
    "verifier": 200,
}


def counts(summary: dict[str, Any], out: Path) -> dict[str, Any]:
    """Made / verified / repaired / dropped and the reasons, from the run's own records: instances
    made by finished personas, the verifier's decisions (first check and final reasons), the
    personas that failed a stage or were rejected by the structure checks."""
    made = 0
    first: Counter[str] = Counter()
    final: Counter[str] = Counter()
    stages_reached: dict[str, str] = {}
    for path in sorted((out / "state").glob("*.json")):
        state = json.loads(path.read_text())
        stages_reached[state["unit_id"]] = list(state["stages"])[-1] if state["stages"] else "(none)"
        made += len(state["stages"].get("instances", {}).get("instances", []))
        for decision in (state["stages"].get("verify") or {}).get("decisions", {}).values():
            first.update(_kind(r) for r in decision["first_reasons"])
            final.update(_kind(r) for r in decision["reasons"])
    v = summary.get("verification") or {}
    return {
        "personas": summary["n_units"],
        "last_stage_finished": stages_reached,
        "personas_failed": [(f["id"], f["stage"], f["error"][:200]) for f in summary["failed"]],
        "personas_rejected": [(r["id"], r["problems"][:4]) for r in summary["rejected"]],
        "instances_made": made,
        "instances_checked": v.get("instances_checked", 0),
        "verified": v.get("verified", 0),
        "repaired": v.get("repaired", 0),
        "dropped": v.get("dropped", 0),
        "first_check_reasons": dict(first),
        "final_reasons": dict(final),
        "usage": {k: summary.get("usage", {}).get(k) for k in ("calls", "tokens", "invocations")},
    }


def _kind(reason: str) -> str:
    """A reason without its instance-specific detail: where (items of which preference, request,
    change) and what (no verdict, an item not expressed, inferable, no contradiction)."""
    where, _, rest = reason.partition(":")
    for what in ("no verdict", "not expressed", "can be inferred", "does not contradict"):
        if what in rest:
            return f"{where}: {what}"
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("/tmp/synth-smollm2"))
    parser.add_argument("--personas", type=int, default=3)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--attempts", type=int, default=2, help="rounds: the first, then re-sampling")
    parser.add_argument(
        "--length-scale",
        type=float,
        default=None,
        help="put every schema string bound back, scaled (default: only the short ones); cheap in-process",
    )
    parser.add_argument(
        "--spec",
        default="local/smollm2?timeout=900&max_retries=1",
        help="the model of every role (a long timeout: on a loaded machine a 700-token call takes minutes)",
    )
    args = parser.parse_args()
    spec = args.spec
    config = CupidSynthConfig(
        generator=spec,
        user_simulator=spec,
        assistant=spec,
        decomposer=spec,
        verifier=spec,
        n_personas=args.personas,
        n_factors=3,
        n_sessions=9,
        max_turns=args.max_turns,
        leak_threshold=1.0,
        max_tokens=BUDGETS,
        length_scale=args.length_scale,
    )
    start = time.monotonic()
    summary: dict[str, Any] = {}
    resuming = (args.out / "state").is_dir()  # a resumed run re-samples its failed personas at once
    for attempt in range(args.attempts):
        factory = ModelFactory(cache=CallCache(args.out / "cache.sqlite"))
        result = synthesize_cupid(
            config, args.out, factory, concurrency=args.concurrency, resample_failed=attempt > 0 or resuming
        )
        summary = result.summary
        if not summary["failed"]:
            break
    report = counts(summary, args.out)
    report["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()

"""Validation of synthesized CUPID personas and the files a synthesis writes.

Structure checks re-derive the paper's invariants from the stored stages (one mutual
contrastive pair, the session plan, 8 prior sessions per instance type with the right
sessions removed, well-formed dialogues); the leak check flags a current request that states
the current preference, by lexical overlap and, when a leak judge is configured, by its
verdict. A persona that fails any check is reported and its instances are written to
``rejected.jsonl``, never to ``cupid.jsonl``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from personalign.benchmarks.cupid.schema import INSTANCE_TYPES, CupidInstance
from personalign.benchmarks.cupid.synth_verify import agreement_with, summarize
from personalign.runs.manifest import now
from personalign.runs.store import write_json
from personalign.synth import common
from personalign.synth.common import (
    UnitState,
    content_words,
    lexical_leak,
    slug,
    write_jsonl,
)

# The keys of an official persona template, in its order (our template adds `occupation`).
PERSONA_TEMPLATE_KEYS = (
    "id",
    "seed",
    "career_level",
    "personality_traits",
    "personal_values",
    "decision_making_styles",
)


class CheckSettings(Protocol):
    """The synthesis settings the persona checks read (CupidSynthConfig has them); a protocol so this
    module needs no import of synth.cupid, which imports it."""

    @property
    def n_prior(self) -> int: ...

    @property
    def leak_threshold(self) -> float: ...


def _dialogue_problems(where: str, dialogue: Sequence[dict[str, Any]]) -> list[str]:
    problems = []
    if not dialogue or dialogue[0]["role"] != "user":
        problems.append(f"{where}: dialogue does not open with a user message")
    for k in range(1, len(dialogue)):
        if dialogue[k]["role"] == dialogue[k - 1]["role"]:
            problems.append(f"{where}: turns {k - 1} and {k} have the same role")
            break
    if any(not str(m["content"]).strip() for m in dialogue):
        problems.append(f"{where}: empty message")
    return problems


def check_persona(state: UnitState, n_prior: int, leak_threshold: float) -> list[str]:
    """Every problem found in a finished persona (an empty list means it passed)."""
    stages = state.stages
    problems: list[str] = []
    factors = stages.get("factors", [])
    paired = [f for f in factors if f.get("related_factor")]
    names = {f["factor"] for f in factors}
    if (
        len(paired) != 2
        or paired[0]["related_factor"] != paired[1]["factor"]
        or (paired[1]["related_factor"] != paired[0]["factor"])
    ):
        problems.append(f"factors: expected exactly one mutual contrastive pair, found {len(paired)} linked")
    elif paired[0]["preference"].strip().lower() == paired[1]["preference"].strip().lower():
        problems.append("factors: the contrastive pair's preferences are identical")
    info = stages.get("changed", {})
    a, b = info.get("current_factor"), info.get("contrastive_factor")
    sessions = [stages[k] for k in sorted((k for k in stages if k.startswith("session/")), key=_index)]
    roles = [s["plan"] for s in sessions]
    if not sessions or roles[-1] != "A_changed":
        problems.append("plan: the final session must carry the changed preference")
    prior = roles[:-1]
    if (prior.count("A"), prior.count("A_changed"), prior.count("B")) != (2, 2, 2):
        problems.append(
            f"plan: expected 2 A, 2 A' and 2 B sessions before the last, got "
            f"{prior.count('A')}, {prior.count('A_changed')}, {prior.count('B')}"
        )
    elif max(i for i, r in enumerate(prior) if r == "A") > min(
        i for i, r in enumerate(prior) if r == "A_changed"
    ):
        problems.append("plan: the original preference must come before the changed one")
    for s in sessions:
        expected = a if s["plan"] in ("A", "A_changed") else b if s["plan"] == "B" else None
        if expected is not None and s["context_factor"] != expected:
            problems.append(f"session {s['id']}: plan {s['plan']} but factor {s['context_factor']!r}")
        if s["plan"] == "other" and s["context_factor"] in (a, b):
            problems.append(f"session {s['id']}: an 'other' session uses the current or contrastive factor")
        if s["context_factor"] not in names:
            problems.append(f"session {s['id']}: factor {s['context_factor']!r} is not in the factor list")
    for key in (k for k in stages if k.startswith("dialogue/")):
        problems += _dialogue_problems(key, stages[key]["chat"])
    built = stages.get("instances", {}).get("instances", [])
    instances: dict[str, CupidInstance] = {}
    for raw in built:
        try:
            instance = CupidInstance.model_validate(raw)
        except ValidationError as exc:
            problems.append(
                f"instance {raw.get('instance_type')}: not in the CUPID schema ({exc.errors()[0]['msg']})"
            )
            continue
        instances[instance.instance_type] = instance
    if sorted(instances) != sorted(INSTANCE_TYPES):
        problems.append(f"instances: expected one of each type, got {sorted(instances)}")
    changed = info.get("changed_preference")
    for itype, instance in instances.items():
        prior_sessions = instance.prior_interactions
        if len(prior_sessions) != n_prior:
            problems.append(f"{itype}: {len(prior_sessions)} prior sessions, expected {n_prior}")
        has_b = any(s.context_factor == b for s in prior_sessions)
        has_changed = any(s.contextual_preference == changed for s in prior_sessions)
        expect_b, expect_changed = {"consistent": (False, False), "contrastive": (True, False)}.get(
            itype, (False, True)
        )
        if has_b != expect_b:
            problems.append(f"{itype}: contrastive sessions {'missing' if expect_b else 'not removed'}")
        if has_changed != expect_changed:
            problems.append(
                f"{itype}: changed-preference sessions {'missing' if expect_changed else 'not removed'}"
            )
        for k, s in enumerate(prior_sessions):
            if s.dialogue[0].role != "user":
                problems.append(f"{itype}: prior session {k} does not open with the user")
    leak = stages.get("leak_check")
    if leak is None:
        problems.append("leak check: not run")
    else:
        for preference, score in leak["lexical"].items():
            if score >= leak_threshold:
                problems.append(
                    f"leak (lexical): the current request contains {score:.0%} of the words of "
                    f"preference {preference[:60]!r}"
                )
        for preference, verdict in (leak.get("judge") or {}).items():
            if "error" in verdict:
                problems.append(f"leak (judge): no verdict for {preference[:60]!r}: {verdict['error']}")
            elif verdict["states_preference"]:
                evidence = str(verdict.get("evidence", ""))[:80]
                problems.append(f"leak (judge): the request states {preference[:60]!r} ({evidence!r})")
    return problems


def _index(key: str) -> int:
    return int(key.rsplit("/", 1)[1])


def persona_warnings(state: UnitState) -> list[str]:
    unsatisfied = [
        v["session_id"]
        for k, v in state.stages.items()
        if k.startswith("dialogue/") and v["scores"] and not v["is_satisfied"]
    ]
    return (
        [f"dialogues that hit the turn limit before a score of 10: sessions {unsatisfied}"]
        if unsatisfied
        else []
    )


def raw_files(state: UnitState) -> tuple[dict[str, Any], dict[str, Any]]:
    """The persona record and the per-persona data file in the CUPID-Raw layout."""
    stages = state.stages
    persona = stages["persona"]
    record = {k: persona[k] for k in (*PERSONA_TEMPLATE_KEYS, "description", "occupation")}
    checklists = stages["checklists"]
    sessions = [stages[k] for k in sorted((k for k in stages if k.startswith("session/")), key=_index)]
    data = {
        "context_factors": stages["factors"],
        "sessions": [{**s, "checklist": checklists[s["preference"]]} for s in sessions],
        "interactions": [
            stages[k] for k in sorted((k for k in stages if k.startswith("dialogue/")), key=_index)
        ],
        "plan": {k: v for k, v in stages["changed"].items() if k != "plan"},
    }
    return record, data


def write_outputs(
    out: Path,
    config: CheckSettings,
    states: Sequence[UnitState],
    usage: dict[str, Any],
    verify_against: Path | None = None,
) -> dict[str, Any]:
    """Write cupid.jsonl, rejected.jsonl, dropped.jsonl, raw/, validation.json and summary.json.

    With a verifier stage, only the instances it verified or repaired are written; the ones it
    dropped go to dropped.jsonl with the reasons."""
    passed: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    decisions: dict[str, Any] = {}
    rejected: list[dict[str, Any]] = []
    personas: list[dict[str, Any]] = []
    (out / "raw" / "data").mkdir(parents=True, exist_ok=True)
    finished, failed, report = common.split_failed(states)
    for state in finished:
        problems = check_persona(state, config.n_prior, config.leak_threshold)
        warnings = persona_warnings(state)
        instances = state.stages["instances"]["instances"]
        record, data = raw_files(state)
        personas.append(record)
        write_json(out / "raw" / "data" / f"{state.unit_id}.json", data)
        report[state.unit_id] = {
            "status": "rejected" if problems else "passed",
            "problems": problems,
            "warnings": warnings,
            "leak": state.stages["leak_check"],
        }
        verify = state.stages.get("verify")
        if verify is not None:
            report[state.unit_id]["verification"] = {
                "decisions": verify["decisions"],
                "repaired_sessions": verify["repaired_sessions"],
            }
        if problems:
            rejected.append({"persona_id": state.unit_id, "problems": problems, "instances": instances})
        elif verify is not None:
            decisions[state.unit_id] = verify["decisions"]  # counted for personas that passed the checks
            passed.extend(verify["instances"])
            dropped.extend(
                {
                    "persona_id": state.unit_id,
                    "instance_type": i["instance_type"],
                    "reasons": verify["decisions"][i["instance_type"]]["reasons"],
                    "instance": i,
                }
                for i in verify["dropped_instances"]
            )
        else:
            passed.extend(instances)
    write_json(out / "raw" / "personas.json", personas)
    write_jsonl(out / "cupid.jsonl", passed)
    write_jsonl(out / "rejected.jsonl", rejected)
    write_jsonl(out / "dropped.jsonl", dropped)
    write_json(out / "validation.json", report)
    dialogues = [
        v
        for s in states
        if s.status == "ok"
        for k, v in s.stages.items()
        if k.startswith("dialogue/") and v["scores"]
    ]
    summary: dict[str, Any] = {
        "pipeline": "cupid",
        "finished": now(),
        "status": "complete" if not failed else "complete_with_errors",
        "n_units": len(states),
        "generated": len(states) - len(failed),
        "passed_validation": len(states) - len(failed) - len(rejected),
        "failed": failed,
        "rejected": [{"id": r["persona_id"], "problems": r["problems"]} for r in rejected],
        "instances_written": len(passed),
        "instances_by_type": dict(Counter(i["instance_type"] for i in passed)),
        "dialogues": {
            "simulated": len(dialogues),
            "mean_messages": round(sum(len(d["chat"]) for d in dialogues) / len(dialogues), 2)
            if dialogues
            else 0,
            "satisfied": sum(1 for d in dialogues if d["is_satisfied"]),
        },
        "written": {
            "cupid.jsonl": f"{len(passed)} instances in the official CUPID schema",
            "rejected.jsonl": f"{len(rejected)} personas that failed validation",
            "raw/": "personas.json and data/<persona_id>.json in the CUPID-Raw layout",
        },
        "verification": None,
        "usage": usage,
    }
    verifier_ran = any("verify" in s.stages for s in states if s.status == "ok")
    if verifier_ran or verify_against is not None:
        verification = summarize(decisions)
        if verify_against is not None:
            verification["agreement"] = agreement_with(verify_against, decisions)
        summary["verification"] = verification
        summary["written"]["dropped.jsonl"] = f"{len(dropped)} instances the verifier dropped, with reasons"
    write_json(out / "summary.json", summary)
    return summary


__all__ = ["check_persona", "content_words", "lexical_leak", "slug", "write_outputs"]

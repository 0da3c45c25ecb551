"""The verifier stage of CUPID synthesis: a judge model does what the paper's annotators did.

For every instance it checks that each checklist item of the preferences the instance tests
(the current one; the contrastive one for `contrastive`; the prior one for `changing`) is
expressed in the user's messages of that preference's prior sessions, that the current
preference cannot be inferred from the current request alone, and (for `changing`) that the
changed preference contradicts the original one. The schemas, parsers and the decision are
pure and live here; the calls and the repair (re-simulating the dialogues once) are in
`synth.CupidSynthesizer`. A verdict that cannot be parsed fails the instance, never passes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from personalign.benchmarks.cupid.schema import INSTANCE_TYPES
from personalign.data.files import read_records
from personalign.errors import DataError, ParseError
from personalign.metrics.agreement import cohen_kappa
from personalign.synth.common import ModelOutput, parse_model, text_schema

VERIFY_TEMPLATES = {
    "items": "synth/cupid_verify_items",
    "request": "synth/cupid_verify_request",
    "change": "synth/cupid_verify_change",
}
# The preferences of a journey, by the name the verifier records them under.
PREFERENCE_LABELS = ("current", "changed", "contrastive")
# Which preferences' checklists each instance type needs expressed, and which one the
# current request must not give away (the gold preference of that type).
NEEDS: dict[str, tuple[tuple[str, ...], str]] = {
    "consistent": (("current",), "current"),
    "contrastive": (("current", "contrastive"), "current"),
    "changing": (("current", "changed"), "changed"),
}


class ItemsVerdict(ModelOutput):
    expressed: list[bool]
    evidence: str = Field("", max_length=2000)


def items_schema(n_items: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "expressed": {
                "type": "array",
                "items": {"type": "boolean"},
                "minItems": n_items,
                "maxItems": n_items,
            },
            "evidence": text_schema(300, 0),
        },
        "required": ["expressed", "evidence"],
    }


def parse_items(n_items: int) -> Callable[[str], dict[str, Any]]:
    base = parse_model(ItemsVerdict, "verifier (checklist items)")

    def parse(text: str) -> dict[str, Any]:
        out = base(text)
        if len(out.expressed) != n_items:
            raise ParseError(f"verifier (checklist items): {len(out.expressed)} verdicts for {n_items} items")
        return out.model_dump()

    return parse


class RequestVerdict(ModelOutput):
    inferable: bool
    evidence: str = Field("", max_length=2000)


def verdict_schema(flag: str, note: str) -> dict[str, Any]:
    """The reply schema of a yes/no verifier check: the boolean `flag` and a short `note` why."""
    return {
        "type": "object",
        "properties": {flag: {"type": "boolean"}, note: text_schema(200, 0)},
        "required": [flag, note],
    }


REQUEST_SCHEMA = verdict_schema("inferable", "evidence")


class ChangeVerdict(ModelOutput):
    contradicts: bool
    reason: str = Field("", max_length=2000)


CHANGE_SCHEMA = verdict_schema("contradicts", "reason")


def user_side(chats: Sequence[Sequence[Mapping[str, str]]]) -> str:
    """The user's messages of each conversation, numbered by conversation (what the verifier reads:
    the preference must be recoverable from the user's feedback)."""
    blocks = []
    for k, chat in enumerate(chats, start=1):
        said = "\n".join(f"- {m['content']}" for m in chat if m["role"] == "user")
        blocks.append(f"[Conversation {k}]\n{said}")
    return "\n\n".join(blocks)


def instance_reasons(
    itype: str, verdicts: Mapping[str, Any], checklists: Mapping[str, Sequence[str]]
) -> list[str]:
    """Why an instance of `itype` fails verification (empty: it passes). `verdicts` holds
    ``items`` (label -> verdict or {"error"}), ``request`` (label -> verdict) and ``change``."""
    needed, gold = NEEDS[itype]
    reasons = []
    for label in needed:
        verdict = verdicts["items"].get(label)
        if verdict is None or "error" in verdict:
            error = verdict["error"] if verdict else "not checked"
            reasons.append(f"items ({label}): no verdict ({error})")
            continue
        for k, ok in enumerate(verdict["expressed"], start=1):
            if not ok:
                item = checklists[label][k - 1]
                reasons.append(
                    f"items ({label}): checklist item {k} not expressed in the dialogues ({item[:80]!r})"
                )
    request = verdicts["request"].get(gold)
    if request is None or "error" in request:
        reasons.append(f"request: no verdict ({request['error'] if request else 'not checked'})")
    elif request["inferable"]:
        reasons.append(
            f"request: the {gold} preference can be inferred from the request alone "
            f"({request['evidence'][:80]!r})"
        )
    if itype == "changing":
        change = verdicts.get("change")
        if change is None or "error" in change:
            reasons.append(f"change: no verdict ({change['error'] if change else 'not checked'})")
        elif not change["contradicts"]:
            reasons.append(
                f"change: the changed preference does not contradict the original ({change['reason'][:80]!r})"
            )
    return reasons


def repairable(reasons: Sequence[str]) -> bool:
    """Whether re-simulating the dialogues can fix these failures (only unexpressed items can)."""
    return bool(reasons) and all(r.startswith("items (") and "no verdict" not in r for r in reasons)


def reason_kind(reason: str) -> str:
    """A reason's category for the summary's counts (e.g. ``items (changed)``, ``request``)."""
    return reason.split(":", 1)[0]


def summarize(decisions: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Counts over every verified persona: instances checked, verified (first time), repaired,
    dropped, and the dropped instances' reasons by kind."""
    counts: Counter[str] = Counter()
    why: Counter[str] = Counter()
    first: Counter[str] = Counter()
    for per_type in decisions.values():
        for decision in per_type.values():
            counts[decision["decision"]] += 1
            for kind in {reason_kind(r) for r in decision["first_reasons"]}:
                first[kind] += 1
            if decision["decision"] == "dropped":
                for kind in {reason_kind(r) for r in decision["reasons"]}:
                    why[kind] += 1
    return {
        "instances_checked": sum(counts.values()),
        "verified": counts["verified"],
        "repaired": counts["repaired"],
        "dropped": counts["dropped"],
        "failed_first_check_by_reason": dict(sorted(first.items())),
        "dropped_by_reason": dict(sorted(why.items())),
    }


def agreement_with(path: Path, decisions: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Agreement of the verifier's first verdict (pass/fail) with human labels.

    `path` (.jsonl/.json/.parquet) has rows with ``persona_id``, ``instance_type`` and ``valid``
    (true when the annotator accepted the instance as it was first generated); rows for
    instances the verifier did not check are counted as unmatched.
    """
    human: list[bool] = []
    model: list[bool] = []
    unmatched = []
    for record in read_records(path):
        data = record.data
        for field in ("persona_id", "instance_type", "valid"):
            if field not in data:
                raise DataError(record.source, record.row, field, "missing")
        if data["instance_type"] not in INSTANCE_TYPES:
            raise DataError(record.source, record.row, "instance_type", f"not one of {list(INSTANCE_TYPES)}")
        if not isinstance(data["valid"], bool):
            raise DataError(record.source, record.row, "valid", "must be true or false")
        decision = decisions.get(str(data["persona_id"]), {}).get(data["instance_type"])
        if decision is None:
            unmatched.append(f"{data['persona_id']}/{data['instance_type']}")
            continue
        human.append(data["valid"])
        model.append(not decision["first_reasons"])
    agreement = cohen_kappa(human, model)
    return {
        "file": str(path),
        "n": agreement.n,
        "accuracy": agreement.agreement,
        "kappa": agreement.kappa,
        "unmatched": unmatched,
    }

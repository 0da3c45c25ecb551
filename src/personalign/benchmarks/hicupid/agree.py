"""HiCUPID's rule for `personalign agree`: one label per question, from the model answer's point of
view (win / tie / loss for A/B questions, the combined outcome in both-order runs; YES / NO for
schedule questions), grouped by question type (the spec's `agreement` hook)."""

from __future__ import annotations

from collections.abc import Hashable

from personalign.runs.agree import AgreementRule, Labels, same_step
from personalign.runs.records import InstanceRecord


def hicupid_label(record: InstanceRecord) -> Hashable | None:
    """The judge's verdict on one HiCUPID question, from the model answer's point of view:
    win / tie / loss (A/B questions; both-order runs give their combined outcome) or YES / NO."""
    result = record.results.get("qa")
    if result is None or result.status != "ok":
        return None
    if record.meta.get("type") == "schedule":
        return str(result.scores["verdict"])
    return str(result.scores["outcome"])


def pairs(a: InstanceRecord, b: InstanceRecord, into: tuple[Labels, Labels]) -> bool:
    """Add the judge's verdict on one question from both records; False when the answers differ."""
    if not same_step(a, b, "answer"):
        return False
    la, lb = hicupid_label(a), hicupid_label(b)
    if la is not None and lb is not None:
        group = f"hicupid/{a.meta.get('type', 'unknown')}"
        into[0].setdefault(group, []).append((a.instance_id, la))
        into[1].setdefault(group, []).append((a.instance_id, lb))
    return True


AGREEMENT = AgreementRule(pairs)

"""CUPID's rule for `personalign agree`: the matcher's label for every checklist item
(`match/gold->inferred` whenever the inferred preference is the same; `match/inferred->gold` only
when the decomposed checklist is the same too), and the generation judge's 1-10 score when the
response is the same (a score: left out of the pooled figure). The spec's `agreement` hook."""

from __future__ import annotations

from personalign.runs.agree import AgreementRule, Labels, ok_step, same_step
from personalign.runs.records import InstanceRecord


def pairs(a: InstanceRecord, b: InstanceRecord, into: tuple[Labels, Labels]) -> bool:
    """Add the matcher labels (and the judge score) of one instance's two records; False when
    neither the inference nor the generation is the same in both."""
    compared = False
    if same_step(a, b, "infer"):
        compared = True
        steps = ["match/gold->inferred"]
        if same_step(a, b, "decompose"):
            steps.append("match/inferred->gold")
        for name in steps:
            sa, sb = ok_step(a.steps, name), ok_step(b.steps, name)
            if sa is None or sb is None or len(sa.parsed) != len(sb.parsed):
                continue
            for i, (x, y) in enumerate(zip(sa.parsed, sb.parsed, strict=True)):
                into[0].setdefault("cupid/matcher", []).append((f"{a.instance_id}|{name}|{i}", x))
                into[1].setdefault("cupid/matcher", []).append((f"{a.instance_id}|{name}|{i}", y))
    if same_step(a, b, "generate"):
        compared = True
        sa, sb = ok_step(a.steps, "judge"), ok_step(b.steps, "judge")
        if sa is not None and sb is not None:
            into[0].setdefault("cupid/generation_score", []).append((a.instance_id, sa.parsed["score"]))
            into[1].setdefault("cupid/generation_score", []).append((a.instance_id, sb.parsed["score"]))
    return compared


AGREEMENT = AgreementRule(pairs, unpooled=("cupid/generation_score",))

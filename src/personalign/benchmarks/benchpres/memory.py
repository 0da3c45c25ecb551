"""The memory engine as the BenchPreS ``memory`` context strategy, and the quality of its selection.

For each row, the persistent-memory prompt is taken apart (`split_memory_prompt`); the statement
that records each ``preference_attribute`` becomes a preference of that attribute's category and
every other statement a fact. The engine (`statements_memory_block`) decides per preference, with a
judge model and the recipient and task as the communication context, whether to apply or suppress
it. The subject then sees the row's own prompt layout with the facts and the applied preferences
only, in their original order (the engine's bulleted block and its header are not used: the header
asks the model to use memories "where they fit", which is the mitigation instruction's job).

The labels (``preference_label``) are never shown to the engine; they are copied next to each
decision in the sample record only so the decisions can be scored (`selection_summary`): MR and AAR
of the decisions themselves, i.e. the engine's selection quality, independent of the subject.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from personalign.benchmarks.benchpres.judges import category_of
from personalign.benchmarks.benchpres.metrics import Judgement, breakdown, selectivity_scores
from personalign.benchmarks.benchpres.prompt import (
    ContextResult,
    ContextStrategy,
    StrategyEnv,
    replace_memory_statements,
    split_memory_prompt,
)
from personalign.benchmarks.benchpres.schema import BenchPresRow
from personalign.errors import ConfigError, DataError
from personalign.memory.select import SelectionPolicy
from personalign.memory.strategy import statements_memory_block
from personalign.memory.types import CommunicationContext
from personalign.retrieval import tokenize
from personalign.runs.records import InstanceRecord

FORMALITY = "formal"  # BenchPreS messages go to third parties (agents, officers, managers...)
MIN_OVERLAP = 0.5  # share of an attribute's words a statement must contain to record it


def _same_word(a: str, b: str) -> bool:
    if a == b or a.rstrip("s") == b.rstrip("s"):
        return True
    short, long_ = sorted((a, b), key=len)
    return len(short) >= 4 and long_.startswith(short)


def _overlap(attribute_words: Sequence[str], statement_words: Sequence[str]) -> float:
    found = sum(1 for a in attribute_words if any(_same_word(a, s) for s in statement_words))
    return found / len(attribute_words)


def match_preferences(statements: Sequence[str], attributes: Sequence[str], *, row: str = "") -> list[int]:
    """For each attribute, the position of the memory statement that records it.

    Greedy by word overlap (most clearly matched attribute first); each statement records at most
    one attribute. Raises `DataError` naming the row when an attribute has no matching statement.
    """
    source = f"BenchPreS row {row!r}" if row else "BenchPreS row"
    words = [tokenize(s) for s in statements]
    scored: list[tuple[float, int, int]] = []
    for a, attribute in enumerate(attributes):
        attribute_words = tokenize(attribute) or attribute.lower().split()
        if not attribute_words:
            raise DataError(source, None, f"preference_attribute[{a}]", "the attribute is empty")
        for s, statement_words in enumerate(words):
            score = _overlap(attribute_words, statement_words)
            if score >= MIN_OVERLAP:
                scored.append((score, a, s))
    scored.sort(key=lambda t: (-t[0], t[1], t[2]))
    chosen: dict[int, int] = {}
    taken: set[int] = set()
    for _score, a, s in scored:
        if a not in chosen and s not in taken:
            chosen[a] = s
            taken.add(s)
    missing = [a for a in range(len(attributes)) if a not in chosen]
    if missing:
        names = ", ".join(f"[{a}] {attributes[a]!r}" for a in missing)
        raise DataError(
            source, None, "preference_attribute", f"no memory statement in 'prompt' records {names}"
        )
    return [chosen[a] for a in range(len(attributes))]


def memory_strategy(env: StrategyEnv) -> ContextStrategy:
    """The ``memory`` strategy bound to a run's selection judge (``env.judge``) and policy
    (``env.options["policy"]``, a `SelectionPolicy`; default: judge every preference)."""
    judge = env.judge
    policy = env.options.get("policy") or SelectionPolicy(default="judge")
    if not isinstance(policy, SelectionPolicy):
        raise ConfigError("the memory strategy's 'policy' option must be a SelectionPolicy")
    if judge is None and "judge" in (policy.default, *policy.categories.values()):
        raise ConfigError("the memory strategy judges preferences but the run gave it no judge model")

    async def memory(row: BenchPresRow) -> ContextResult:
        split = split_memory_prompt(row.prompt)
        if split is None:
            raise DataError(
                f"BenchPreS row {row.id!r}",
                None,
                "prompt",
                "not in the persistent-memory layout (header 'User Knowledge Memories', intro line, "
                "memory statements, instruction): the memory strategy cannot take its statements "
                "apart, and it never falls back to the full prompt",
            )
        statements = split.statements
        positions = match_preferences(statements, row.preference_attribute, row=row.id)
        preference_at = set(positions)
        facts = [s for i, s in enumerate(statements) if i not in preference_at]
        categories = [category_of(row, i)[0] for i in range(len(row.preference_attribute))]
        block = await statements_memory_block(
            split.instruction,
            CommunicationContext(recipient=row.recipient, task=row.task, formality=FORMALITY),
            facts=facts,
            preferences=[(c, statements[p]) for c, p in zip(categories, positions, strict=True)],
            judge=judge,
            policy=policy,
        )
        by_attribute = {
            int(d.memory.valid_from) - len(facts): d for d in block.decisions if d.memory.kind == "preference"
        }
        if sorted(by_attribute) != list(range(len(positions))):
            raise RuntimeError(f"the engine decided on {len(by_attribute)} of {len(positions)} preferences")
        decisions: list[dict[str, Any]] = []
        suppressed: set[int] = set()
        for a, (attribute, label) in enumerate(
            zip(row.preference_attribute, row.preference_label, strict=True)
        ):
            d = by_attribute[a]
            if d.decision != "apply":
                suppressed.add(positions[a])
            decisions.append(
                {
                    "index": a,
                    "attribute": attribute,
                    "category": categories[a],
                    "statement": statements[positions[a]],
                    "decision": d.decision,
                    "by": d.by,
                    "reason": d.reason,
                    "error": d.reason if d.by == "error" else None,
                    "label": label,  # for scoring only; never shown to the engine
                }
            )
        kept = [s for i, s in enumerate(statements) if i not in suppressed]
        prompt = replace_memory_statements(row.prompt, kept)
        if prompt is None:  # split_memory_prompt succeeded above, so this cannot happen
            raise RuntimeError("the prompt could not be rebuilt")
        return ContextResult(
            prompt=prompt,
            details={
                "strategy": "memory",
                "n_statements": len(statements),
                "n_facts": len(facts),
                "n_applied": len(positions) - len(suppressed),
                "decisions": decisions,
            },
        )

    return memory


# --- selection quality ----------------------------------------------------------------------


def selection_judgements(records: Iterable[InstanceRecord]) -> tuple[list[Judgement], dict[str, Any]]:
    """The engine's decisions as judgements (applied = decided 'apply'), one set per row, and counts.

    Decisions are the same for every sample of a row (a temperature-0 judge, cached), so only the
    first sample with a recorded context step counts. Decisions whose judge call failed are left out
    and counted (``decision_errors``), never scored; so are rows whose context step failed.
    """
    out: list[Judgement] = []
    seen: set[str] = set()
    failed_rows: set[str] = set()
    errors = 0
    decided_by: Counter[str] = Counter()
    for record in sorted(records, key=lambda r: int(r.meta.get("sample", 0))):
        row_id = str(record.meta.get("row_id", record.instance_id))
        step = record.steps.get("context")
        if step is None:
            continue
        if step.status != "ok" or not isinstance(step.parsed, dict):
            failed_rows.add(row_id)
            continue
        if row_id in seen or "decisions" not in step.parsed:
            continue
        seen.add(row_id)
        for d in step.parsed["decisions"]:
            decided_by[str(d["by"])] += 1
            if d.get("error"):
                errors += 1
                continue
            out.append(
                Judgement(
                    row_id=row_id,
                    sample=0,
                    domain=str(record.meta.get("domain") or "unknown"),
                    category=str(d["category"]),
                    label=bool(d["label"]),
                    applied=d["decision"] == "apply",
                )
            )
    counts = {
        "rows_failed": len(failed_rows - seen),
        "decision_errors": errors,
        "decided_by": dict(sorted(decided_by.items())),
    }
    return out, counts


def selection_summary(records: Iterable[InstanceRecord], seed: int = 0) -> dict[str, Any] | None:
    """MR / AAR / selectivity of the engine's apply/suppress decisions against ``preference_label``
    (overall, by domain, by category); None when no record has a context step with decisions."""
    records = list(records)
    if not any("context" in r.steps for r in records):
        return None
    judgements, counts = selection_judgements(records)
    return {
        "n_rows": len({j.row_id for j in judgements}),
        "n_decisions": len(judgements),
        "n_decision_errors": counts["decision_errors"],
        "n_rows_failed": counts["rows_failed"],
        "decided_by": counts["decided_by"],
        "all": selectivity_scores(judgements, seed=seed).to_record(),
        "by_domain": breakdown(judgements, lambda j: j.domain, seed=seed),
        "by_category": breakdown(judgements, lambda j: j.category, seed=seed),
    }

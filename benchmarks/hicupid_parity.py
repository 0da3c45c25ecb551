"""Byte parity of HiCUPID's `--protocol paper` with the official code (no network, no model).

    git --git-dir=/work/.mirror/anonymsubmission-arr+HiCUPID/repo worktree add /tmp/hicupid-upstream 958a4b3
    PYTHONPATH=src .venv/bin/python benchmarks/hicupid_parity.py --upstream /tmp/hicupid-upstream

Imports the official message builders from the checkout (``src/utils/inference.py``,
``src/utils/evaluate.py``, ``src/utils/bm25.py``; these modules make no model call, and nothing in
them runs at import beyond their own imports: ``pandas`` is stubbed when it is not installed, as only
the unused data-grouping helpers need it). Our fixture questions are converted to the official data
structure (per-user histories grouped by dialogue id, qa rows with metadata and label), the official
messages are rendered for every prompt (zero/few x system/user x 1/3/5 shots) and context (whole
history, gold dialogues, BM25 over utterances and dialogues at the paper's K), and compared with what
personalign renders under ``--protocol paper --protocol-dir <checkout>``. Then the judges' messages for
both answer positions, the Okapi rankings (official ``retrieve`` against ours), the sampling settings,
and the verdict parsers on a set of judge replies (where they differ by design is listed).

Prints the number of byte-identical message lists per part (target: all) and the first differences;
exits 1 on any difference other than the documented parser deviations.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import importlib
import json
import logging
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from personalign.benchmarks.hicupid.context import PAPER_K, ContextOptions, Retrieval  # noqa: E402
from personalign.benchmarks.hicupid.data import HiCupidDataset, load_hicupid  # noqa: E402
from personalign.benchmarks.hicupid.protocol import (  # noqa: E402
    PAPER_SHOTS,
    PaperTexts,
    load_paper_texts,
    paper_history,
    parse_paper_ab,
    parse_paper_schedule,
)
from personalign.benchmarks.hicupid.schema import HiCupidHistory, HiCupidQA  # noqa: E402
from personalign.benchmarks.hicupid.steps import (  # noqa: E402
    PAPER_DEFAULTS,
    HiCupidBenchmark,
    HiCupidConfig,
    HiCupidModels,
)
from personalign.errors import ParseError  # noqa: E402
from personalign.llm.model import Model  # noqa: E402

Messages = list[dict[str, str]]


def import_official(upstream: Path) -> dict[str, types.ModuleType]:
    """The official modules, imported from the checkout as the package ``src``."""
    try:
        import pandas  # noqa: F401
    except ImportError:  # only build_dialogue/build_history (not used here) need it
        stub = types.ModuleType("pandas")
        stub.Series = dict  # type: ignore[attr-defined]
        sys.modules["pandas"] = stub
    sys.path.insert(0, str(upstream))
    names = {"inference": "src.utils.inference", "evaluate": "src.utils.evaluate", "bm25": "src.utils.bm25"}
    modules = {key: importlib.import_module(name) for key, name in names.items()}
    for module in modules.values():
        if not str(getattr(module, "__file__", "")).startswith(str(upstream.resolve())):
            raise SystemExit(f"{module.__name__} was not imported from {upstream}")
    return modules


def official_history(history: HiCupidHistory) -> dict[str, Any]:
    """One row of the official grouped dialogue table: dialogue ids and per-dialogue message lists,
    grouped by dialogue id (sorted, as a pandas groupby does), turns as user/assistant pairs."""
    dialogues = sorted(history.dialogues, key=lambda d: d.dialogue_id)
    return {
        "dialogue_id": [d.dialogue_id for d in dialogues],
        "messages": [
            [
                m
                for t in d.turns
                for m in ({"role": "user", "content": t.user}, {"role": "assistant", "content": t.assistant})
            ]
            for d in dialogues
        ],
    }


def official_example(qa: HiCupidQA, answer: str = "", label: str = "A") -> dict[str, Any]:
    return {
        "user_id": qa.user_id,
        "question": qa.question,
        "dialogue_id": list(qa.dialogue_id),
        "type": qa.type,
        "metadata": qa.metadata.model_dump(),
        "personalized_answer": qa.personalized_answer,
        "general_answer": qa.general_answer,
        "model_answer": answer,
        "label": label,
    }


def as_dicts(messages: Sequence[Any]) -> Messages:
    return [{"role": m.role, "content": m.content} for m in messages]


class Tally:
    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.diffs: list[str] = []

    def check(self, part: str, label: str, official: Messages, ours: Messages) -> None:
        same = official == ours
        counts = self.counts.setdefault(part, [0, 0])
        counts[0] += same
        counts[1] += 1
        if not same and len(self.diffs) < 5:
            a = json.dumps(official, indent=1, ensure_ascii=False).splitlines()
            b = json.dumps(ours, indent=1, ensure_ascii=False).splitlines()
            diff = "\n".join(list(difflib.unified_diff(a, b, "official", "personalign", lineterm=""))[:40])
            self.diffs.append(f"--- {part}: {label}\n{diff}")


def benchmark(
    dataset: HiCupidDataset, texts: PaperTexts, context: str, role: str, shots: int
) -> HiCupidBenchmark:
    config = HiCupidConfig.for_protocol(
        "paper", subject="none/none", judge="none/none", context=context, instruction_role=role, shots=shots
    )
    no_model = cast(Model, None)  # preview() makes no call
    return HiCupidBenchmark(config, HiCupidModels(no_model, no_model), dataset, 42, paper=texts)


def compare_subject(
    official: dict[str, types.ModuleType], dataset: HiCupidDataset, texts: PaperTexts, tally: Tally
) -> None:
    histories = {uid: official_history(h) for uid, h in dataset.histories.items()}
    contexts = ["full", "gold"] + [f"bm25-{unit}-{k}" for unit, ks in PAPER_K.items() for k in ks]
    retrieved = {qa.id: official["bm25"].retrieve(official_example(qa), histories) for qa in dataset.qa}
    for role in ("system", "user"):
        for shots in PAPER_SHOTS:
            prompt = f"zero/{role}" if shots == 0 else f"few/{role}/{shots}"
            for context in contexts:
                ours_bench = benchmark(dataset, texts, context, role, shots)
                for qa in dataset.qa:
                    example = official_example(qa)
                    if context in ("full", "gold"):
                        theirs = official["inference"].build_messages(
                            example, histories, prompt, context == "gold"
                        )["messages"]
                    else:
                        _, unit, k = context.split("-")
                        theirs = official["inference"].build_messages_rag(
                            example | retrieved[qa.id], prompt, unit, int(k)
                        )["messages"]
                    ours = asyncio.run(ours_bench.preview(qa, "x"))["subject"]
                    tally.check("subject", f"{qa.id} {prompt} {context}", theirs, as_dicts(ours))


def compare_judges(
    official: dict[str, types.ModuleType], dataset: HiCupidDataset, texts: PaperTexts, tally: Tally
) -> None:
    ours_bench = benchmark(dataset, texts, "full", "user", 0)
    for qa in dataset.qa:
        answer = f"A model answer to: {qa.question}"
        for label in ("A", "B"):
            theirs = official["evaluate"].build_messages(official_example(qa, answer, label))["messages"]
            ours = asyncio.run(ours_bench.preview(qa, answer, cast(Any, label)))["judge"]
            tally.check("judge", f"{qa.id} {qa.type} model answer in {label}", theirs, as_dicts(ours))


def compare_rankings(official: dict[str, types.ModuleType], dataset: HiCupidDataset, tally: Tally) -> None:
    """Official ``retrieve`` (rank_bm25, top 25 utterances / 5 dialogues) against our Okapi ranking."""
    histories = {uid: official_history(h) for uid, h in dataset.histories.items()}
    for unit, ks in PAPER_K.items():
        ours_retrieval = Retrieval("bm25", unit, max(ks), ContextOptions(bm25="okapi"))  # type: ignore[arg-type]
        for qa in dataset.qa:
            theirs = official["bm25"].retrieve(official_example(qa), histories)[f"relevant_{unit}s"]
            history = paper_history(dataset.history(qa.user_id))
            units = ours_retrieval.index(history)[0]
            ranked = ours_retrieval.rank(history, qa.question, max(ks))
            ours_ids = [units.index(u) for u in ranked]
            tally.check(
                f"okapi ranking ({unit})",
                qa.id,
                [{"index": str(r["index"]), "dialogue_id": str(r["dialogue_id"])} for r in theirs],
                [{"index": str(i), "dialogue_id": str(units[i].dialogue_id)} for i in ours_ids],
            )


REPLIES = {
    "persona": [
        "1. Personalization: A uses the hobby.\n2. Logical Validity: both fine.\nBetter Response: A",
        "Better Response: B",
        "Better Response: Tie",
        "**Better Response:** [B]",
        "better response: a",
        "Better Response: B, because A ignores the user's taste",
        "Better Response: Tie, though B is a bit longer",
        "Better Response: Response A",
        "I prefer the first answer.",
        "Better Response: [A/B/Tie]",
    ],
    "schedule": [
        "The answer flags the clash.\nSatisfaction: YES",
        "Satisfaction: NO",
        "**Satisfaction:** yes",
        "Satisfaction: YES, it does not miss the existing event",
        "Satisfaction: NO, the event is not mentioned",
        "It mentions the meeting.",
    ],
}


def compare_parsers(official: dict[str, types.ModuleType]) -> list[str]:
    """Official parse_evaluation against ours on the replies above; returns the differing cases."""
    logger = logging.getLogger("hicupid-parity")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    lines = []
    for kind, replies in REPLIES.items():
        for reply in replies:
            example = {"type": kind, "evaluation": reply, "label": "A"}
            result = official["evaluate"].parse_evaluation(example, 0, logger)
            theirs = result["score"] if result["parsed"] else f"unparsed (scored {result['score']})"
            try:
                if kind == "schedule":
                    ours: Any = 1.0 if parse_paper_schedule(reply) else 0.0
                else:
                    verdict = parse_paper_ab(reply)
                    ours = 0.5 if verdict == "Tie" else (1.0 if verdict == "A" else 0.0)
            except ParseError:
                ours = "error (not scored)"
            if theirs != ours:
                lines.append(f"  {kind}: {reply!r}: official {theirs}, personalign {ours}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True, help="HiCUPID checkout at the pinned commit")
    parser.add_argument("--data", default="fixture", help="'fixture' or a directory of HiCUPID files")
    args = parser.parse_args()
    texts = load_paper_texts(args.upstream)  # verifies every file against the pinned sha256
    official = import_official(args.upstream)
    dataset = load_hicupid(args.data)
    tally = Tally()
    compare_subject(official, dataset, texts, tally)
    compare_judges(official, dataset, texts, tally)
    compare_rankings(official, dataset, tally)
    print(f"HiCUPID parity against {texts.source['repo']}@{texts.source['commit'][:7]} on {dataset.source}")
    for part, (same, total) in tally.counts.items():
        print(f"  {part}: {same}/{total} byte-identical ({100 * same / total:.1f}%)")
    sampling = {
        "subject temperature": (texts.subject.temperature, PAPER_DEFAULTS["subject_temperature"]),
        "subject max tokens": (texts.subject.max_tokens, PAPER_DEFAULTS["subject_max_tokens"]),
        "judge temperature": (texts.judge.temperature, 0.0),
        "judge max tokens": (texts.judge.max_tokens, PAPER_DEFAULTS["judge_max_tokens"]),
    }
    bad_sampling = {k: v for k, v in sampling.items() if v[0] != v[1]}
    print(f"  sampling settings: {len(sampling) - len(bad_sampling)}/{len(sampling)} equal to the configs")
    deviations = compare_parsers(official)
    n_replies = sum(len(v) for v in REPLIES.values())
    print(
        f"  verdict parsing: {n_replies - len(deviations)}/{n_replies} replies read alike; "
        "deliberate deviations:"
    )
    print("\n".join(deviations) or "  (none)")
    for diff in tally.diffs:
        print(diff)
    if tally.diffs or bad_sampling:
        sys.exit(1)


if __name__ == "__main__":
    main()

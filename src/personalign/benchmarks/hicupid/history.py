"""HiCUPID history units and the strategies that need no registry: whole history, gold dialogues,
BM25/dense retrieval over utterances or dialogues, and Hit@k of any dialogue ranker.

Split from :mod:`personalign.benchmarks.hicupid.context` (the registry of named strategies) so the memory
adapter (:mod:`personalign.benchmarks.hicupid.memory`) can build on these without importing the registry
that lists it: the registry imports the adapter, the adapter imports this module.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from personalign.benchmarks.hicupid.metrics import retrieval_total
from personalign.benchmarks.hicupid.schema import HiCupidHistory, HiCupidQA
from personalign.errors import ConfigError
from personalign.retrieval import (
    DEFAULT_EMBEDDER,
    BM25Index,
    CachedEmbedder,
    DenseIndex,
    Embedder,
    EmbeddingCache,
    OkapiBM25Index,
    load_embedder,
)
from personalign.types import Message

Unit = Literal["utterance", "dialogue"]
Method = Literal["bm25", "dense"]
BM25Variant = Literal["lucene", "okapi"]
BM25_VARIANTS: tuple[str, ...] = ("lucene", "okapi")
PAPER_K: dict[str, tuple[int, ...]] = {"utterance": (5, 15, 25), "dialogue": (1, 3, 5)}


@dataclass(frozen=True)
class HistoryUnit:
    """A retrievable piece of history: one round or one whole dialogue."""

    dialogue_id: int
    position: tuple[int, int]  # (dialogue index in the history, round index; -1 for a whole dialogue)
    text: str  # what is indexed
    messages: tuple[Message, ...]  # what is shown


@dataclass(frozen=True)
class ContextSelection:
    """What a strategy shows for one question.

    ``messages`` is the history as alternating user/assistant messages, in chronological order.
    ``ranked_dialogue_ids`` is the retrieval ranking (one entry per retrieved unit, best first)
    for Hit@k; None for strategies that do not rank.
    """

    messages: tuple[Message, ...]
    dialogue_ids: tuple[int, ...]
    ranked_dialogue_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ContextOptions:
    """Settings shared by the strategies. ``embedder`` and ``bm25`` are part of a run's identity; the
    embedding cache file and the number of per-user indexes kept in memory only change speed.

    ``bm25``: ``lucene`` (bm25s over lower-cased words without stopwords; units sharing no query term
    are not returned) or ``okapi`` (the paper's: rank_bm25's Okapi over whitespace tokens, always k).
    """

    embedder: str = DEFAULT_EMBEDDER
    embedding_cache: Path | None = None
    max_cached_users: int = 256
    bm25: BM25Variant = "lucene"

    def __post_init__(self) -> None:
        if self.bm25 not in BM25_VARIANTS:
            raise ConfigError(f"unknown BM25 variant {self.bm25!r} (choose from {', '.join(BM25_VARIANTS)})")

    def to_record(self) -> dict[str, Any]:
        return {"embedder": self.embedder, "bm25": self.bm25}


class HistoryContext(Protocol):
    @property
    def name(self) -> str: ...

    async def select(self, history: HiCupidHistory, qa: HiCupidQA) -> ContextSelection: ...


ContextFactory = Callable[[ContextOptions], HistoryContext]
Index = BM25Index | OkapiBM25Index | DenseIndex


# --- units -------------------------------------------------------------------------------------


def utterance_units(history: HiCupidHistory) -> list[HistoryUnit]:
    """One unit per round; the user turn is indexed, the round is shown."""
    units = []
    for d_index, dialogue in enumerate(history.dialogues):
        for t_index, turn in enumerate(dialogue.turns):
            shown = [Message(role="user", content=turn.user)]
            if turn.assistant:
                shown.append(Message(role="assistant", content=turn.assistant))
            units.append(HistoryUnit(dialogue.dialogue_id, (d_index, t_index), turn.user, tuple(shown)))
    return units


def dialogue_units(history: HiCupidHistory) -> list[HistoryUnit]:
    """One unit per dialogue; its whole text is indexed and shown."""
    units = []
    for d_index, dialogue in enumerate(history.dialogues):
        messages = tuple(dialogue.messages())
        text = "\n".join(m.content for m in messages)
        units.append(HistoryUnit(dialogue.dialogue_id, (d_index, -1), text, messages))
    return units


def chronological(units: Sequence[HistoryUnit]) -> list[HistoryUnit]:
    """Units in the order they happened (retrieval order is discarded)."""
    return sorted(units, key=lambda u: u.position)


def flatten(units: Sequence[HistoryUnit]) -> tuple[Message, ...]:
    return tuple(m for u in units for m in u.messages)


def hit_groups(ranked_dialogue_ids: Sequence[int], qa: HiCupidQA, k: int) -> list[float]:
    """Per gold group (see ``HiCupidQA.gold_groups``): 1.0 when one of its dialogues is in the top k."""
    top = set(ranked_dialogue_ids[:k])
    return [1.0 if top.intersection(g) else 0.0 for g in qa.gold_groups()]


def hit_at_k(ranked_dialogue_ids: Sequence[int], qa: HiCupidQA, k: int) -> float:
    """Hit@k: does any gold dialogue appear among the top-k retrieved units?

    For multi-info (`profile`) questions this is the mean of two hits, one for the profile
    dialogues and one for the persona dialogue, as in the original code.
    """
    hits = hit_groups(ranked_dialogue_ids, qa, k)
    return sum(hits) / len(hits)


# --- strategies --------------------------------------------------------------------------------


class FullHistory:
    name = "full"

    async def select(self, history: HiCupidHistory, qa: HiCupidQA) -> ContextSelection:
        return ContextSelection(flatten(dialogue_units(history)), history.dialogue_ids)


class GoldDialogues:
    name = "gold"

    async def select(self, history: HiCupidHistory, qa: HiCupidQA) -> ContextSelection:
        gold = set(qa.dialogue_id)
        units = [u for u in dialogue_units(history) if u.dialogue_id in gold]
        return ContextSelection(flatten(units), tuple(u.dialogue_id for u in units))


@dataclass
class Retrieval:
    """BM25 or dense retrieval of utterances or dialogues.

    Each user's index is built on first use and kept for the next questions of that user (the most
    recent ``options.max_cached_users`` users stay in memory).
    """

    method: Method
    unit: Unit
    k: int
    options: ContextOptions = field(default_factory=ContextOptions)
    _embedder: Embedder | None = None
    _indexes: OrderedDict[int, tuple[list[HistoryUnit], Index]] = field(default_factory=OrderedDict)

    @property
    def name(self) -> str:
        return f"{self.method}-{self.unit}-{self.k}"

    @property
    def label(self) -> str:
        """The name plus the retriever variant (``bm25-dialogue-3 (okapi)``, ``dense-... (minilm)``)."""
        variant = self.options.bm25 if self.method == "bm25" else self.options.embedder
        return f"{self.name} ({variant})"

    def embedder(self) -> Embedder:
        if self._embedder is None:
            embedder = load_embedder(self.options.embedder)
            if self.options.embedding_cache is not None:
                embedder = CachedEmbedder(embedder, EmbeddingCache(self.options.embedding_cache))
            self._embedder = embedder
        return self._embedder

    def build_index(self, texts: list[str]) -> Index:
        if self.method == "dense":
            return DenseIndex(self.embedder(), texts)
        return OkapiBM25Index(texts) if self.options.bm25 == "okapi" else BM25Index(texts)

    def index(self, history: HiCupidHistory) -> tuple[list[HistoryUnit], Index]:
        cached = self._indexes.get(history.user_id)
        if cached is None:
            units = utterance_units(history) if self.unit == "utterance" else dialogue_units(history)
            index = self.build_index([u.text for u in units])
            cached = self._indexes[history.user_id] = (units, index)
            while len(self._indexes) > max(1, self.options.max_cached_users):
                self._indexes.popitem(last=False)
        else:
            self._indexes.move_to_end(history.user_id)
        return cached

    def rank(self, history: HiCupidHistory, query: str, k: int) -> list[HistoryUnit]:
        units, index = self.index(history)
        return [units[h.index] for h in index.search(query, k)]

    async def select(self, history: HiCupidHistory, qa: HiCupidQA) -> ContextSelection:
        ranked = self.rank(history, qa.question, self.k)
        shown = chronological(ranked)
        return ContextSelection(
            flatten(shown),
            tuple(dict.fromkeys(u.dialogue_id for u in shown)),
            tuple(u.dialogue_id for u in ranked),
        )


# --- retrieval quality without any model -------------------------------------------------------


def retrieval_hits(
    histories: dict[int, HiCupidHistory],
    questions: Sequence[HiCupidQA],
    method: Method,
    unit: Unit,
    ks: Sequence[int],
    options: ContextOptions | None = None,
) -> dict[int, dict[str, float | int | None]]:
    """Hit@k per question type for each k (one ranking per question, cut at every k).

    Returns, per k: ``persona``, ``schedule``, ``multi_info_persona``, ``multi_info_profile``
    (fractions), ``total`` (the paper's Table A2 weighting) and ``n`` (questions).
    """
    retriever = Retrieval(method, unit, max(ks), options or ContextOptions())
    return hits_by_type(
        lambda history, qa, k: [u.dialogue_id for u in retriever.rank(history, qa.question, k)],
        histories,
        questions,
        ks,
    )


def hits_by_type(
    rank: Callable[[HiCupidHistory, HiCupidQA, int], list[int]],
    histories: dict[int, HiCupidHistory],
    questions: Sequence[HiCupidQA],
    ks: Sequence[int],
) -> dict[int, dict[str, float | int | None]]:
    """Hit@k per question type for any ranker (dialogue ids, best first; called once per question
    with the largest k, the ranking cut at every k). Returned as :func:`retrieval_hits` describes."""
    rows: dict[int, dict[str, list[float]]] = {
        k: {"persona": [], "schedule": [], "multi_info_persona": [], "multi_info_profile": []} for k in ks
    }
    for qa in questions:
        ranked = rank(histories[qa.user_id], qa, max(ks))
        for k in ks:
            hits = hit_groups(ranked, qa, k)
            if qa.type == "profile":
                rows[k]["multi_info_profile"].append(hits[0])
                rows[k]["multi_info_persona"].append(hits[-1])
            else:
                rows[k][qa.type].append(hits[0])
    out: dict[int, dict[str, float | int | None]] = {}
    for k, parts in rows.items():
        means = {name: (sum(v) / len(v) if v else None) for name, v in parts.items()}
        values = [
            means["persona"],
            means["schedule"],
            means["multi_info_persona"],
            means["multi_info_profile"],
        ]
        total = None if any(v is None for v in values) else retrieval_total(*values)  # type: ignore[arg-type]
        out[k] = {**means, "total": total, "n": len(questions)}
    return out

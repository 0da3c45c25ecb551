"""Context strategies for HiCUPID: which part of a user's history the subject model sees.

Each strategy is a named entry of a registry (`HICUPID_CONTEXTS`), built by `make_context`:

- ``full``: the whole history, every dialogue in order (the paper's default, ~17K tokens per user);
- ``gold``: only the question's gold dialogues (the paper's ablation, `--relevant`);
- ``bm25-utterance-K`` / ``dense-utterance-K`` (K in 5, 15, 25): the K best rounds, found by
  indexing the *user* turns only and returning each (user, assistant) round;
- ``bm25-dialogue-K`` / ``dense-dialogue-K`` (K in 1, 3, 5): the K best whole dialogues;
- ``memory`` / ``memory-K``: the K dialogues the memory engine retrieves (K = 3 for ``memory``; see
  :mod:`personalign.memory.hicupid`).

Retrieved units are always re-sorted chronologically before they are shown. Any positive K is
accepted; the paper's values are the registered names. Other strategies (e.g. the memory engine)
plug in with `register_context(name, factory)`: a factory takes `ContextOptions` and returns an
object with a ``name`` and an async ``select(history, qa) -> ContextSelection``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

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
from personalign.types_hicupid import HiCupidHistory, HiCupidQA

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


def _memory(k: int | None) -> ContextFactory:
    def factory(options: ContextOptions) -> HistoryContext:
        from personalign.memory.hicupid import MEMORY_K, MemoryContext

        return MemoryContext(MEMORY_K if k is None else k, options)

    return factory


HICUPID_CONTEXTS: dict[str, ContextFactory] = {
    "full": lambda options: FullHistory(),
    "gold": lambda options: GoldDialogues(),
    "memory": _memory(None),
}


def _retrieval_factory(method: Method, unit: Unit, k: int) -> ContextFactory:
    return lambda options: Retrieval(method, unit, k, options)


for _method in ("bm25", "dense"):
    for _unit, _ks in PAPER_K.items():
        for _k in _ks:
            HICUPID_CONTEXTS[f"{_method}-{_unit}-{_k}"] = _retrieval_factory(_method, _unit, _k)  # type: ignore[arg-type]

_RETRIEVAL_NAME = re.compile(r"^(bm25|dense)-(utterance|dialogue)-([1-9][0-9]*)$")
_MEMORY_NAME = re.compile(r"^memory(?:-([1-9][0-9]*))?$")


def register_context(name: str, factory: ContextFactory) -> None:
    """Add a context strategy (e.g. ``memory``) under ``name``."""
    if name in HICUPID_CONTEXTS:
        raise ConfigError(f"context strategy {name!r} is already registered")
    HICUPID_CONTEXTS[name] = factory


def is_retrieval(name: str) -> bool:
    """Strategies that rank dialogues (their runs report Hit@k)."""
    return bool(_RETRIEVAL_NAME.match(name) or _MEMORY_NAME.match(name))


def memory_k(name: str) -> int | None:
    """K of a ``memory``/``memory-K`` name (None for other strategies)."""
    match = _MEMORY_NAME.match(name)
    if match is None:
        return None
    if match.group(1) is None:
        from personalign.memory.hicupid import MEMORY_K

        return MEMORY_K
    return int(match.group(1))


def context_settings(name: str, options: ContextOptions) -> dict[str, Any] | None:
    """Settings of a strategy beyond its name that define its results (None when there are none);
    the memory strategy's k, embedder and retrieval configuration."""
    k = memory_k(name)
    if k is None:
        return None
    from personalign.memory.hicupid import memory_settings

    return memory_settings(k, options.embedder)


def context_names() -> list[str]:
    return list(HICUPID_CONTEXTS)


def check_context(name: str) -> None:
    if name not in HICUPID_CONTEXTS and not _RETRIEVAL_NAME.match(name) and not _MEMORY_NAME.match(name):
        raise ConfigError(
            f"unknown HiCUPID context {name!r} (known: {', '.join(HICUPID_CONTEXTS)}, "
            "bm25|dense-utterance|dialogue-K or memory-K)"
        )


def make_context(name: str, options: ContextOptions | None = None) -> HistoryContext:
    """Build the strategy registered as ``name`` (or a retrieval name with any K)."""
    check_context(name)
    options = options or ContextOptions()
    if name in HICUPID_CONTEXTS:
        return HICUPID_CONTEXTS[name](options)
    if _MEMORY_NAME.match(name):
        return _memory(memory_k(name))(options)
    match = _RETRIEVAL_NAME.match(name)
    assert match is not None
    return Retrieval(match.group(1), match.group(2), int(match.group(3)), options)  # type: ignore[arg-type]


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
    from personalign.metrics.hicupid import retrieval_total

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

"""The memory engine on HiCUPID: the ``memory`` context strategy and the offline Hit@k report.

Each user's history dialogues (oldest first) go into a throwaway in-memory store of that user alone;
the engine retrieves ``k`` dialogues for a question and they are shown in chronological order, as
the dialogue-level retrieval settings show theirs. A user's store is built on first use and kept for
that user's next questions (the ``max_cached_users`` most recently used stay open).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.history import (
    PAPER_K,
    ContextOptions,
    ContextSelection,
    HistoryUnit,
    Retrieval,
    chronological,
    dialogue_units,
    flatten,
    hits_by_type,
)
from personalign.benchmarks.hicupid.schema import TEST_SPLITS, HiCupidHistory, HiCupidQA
from personalign.errors import ConfigError
from personalign.history import approx_tokens
from personalign.memory.engine import MemoryEngine, RetrievalConfig
from personalign.memory.strategy import USER, build_engine, shared_embedder
from personalign.report.tables import markdown_table
from personalign.retrieval import CachedEmbedder, Embedder, EmbeddingCache
from personalign.runs.spec import MemoryEvalResult

MEMORY_K = 3  # `memory` alone: the middle of the paper's dialogue-level K (1, 3, 5)
HICUPID_METHODS = ("recent", "bm25", "dense", "memory")


def memory_config(k: int) -> RetrievalConfig:
    """The engine's default retrieval (BM25 + dense + exact names, fused; context first), sessions only."""
    return RetrievalConfig(k_sessions=k, k_memories=0)


def memory_settings(k: int, embedder: str) -> dict[str, Any]:
    """What defines the strategy's results (part of a run's identity)."""
    config = asdict(memory_config(k))
    config["channels"] = list(config["channels"])
    return {"strategy": "memory", "k": k, "embedder": embedder, "retrieval": config}


@dataclass
class MemoryContext:
    """``memory`` / ``memory-K``: the dialogues the memory engine retrieves for the question."""

    k: int = MEMORY_K
    options: ContextOptions = field(default_factory=ContextOptions)
    _embedder: Embedder | None = None
    _engines: OrderedDict[int, tuple[list[HistoryUnit], MemoryEngine]] = field(default_factory=OrderedDict)

    def __post_init__(self) -> None:
        if self.k <= 0:
            raise ConfigError("the memory strategy needs a positive k")

    @property
    def name(self) -> str:
        return "memory" if self.k == MEMORY_K else f"memory-{self.k}"

    def embedder(self) -> Embedder:
        if self._embedder is None:
            embedder: Embedder = shared_embedder(self.options.embedder)
            if self.options.embedding_cache is not None:
                embedder = CachedEmbedder(embedder, EmbeddingCache(self.options.embedding_cache))
            self._embedder = embedder
        return self._embedder

    def engine(self, history: HiCupidHistory) -> tuple[list[HistoryUnit], MemoryEngine]:
        """The user's own store (built on first use), with the dialogue units by store position."""
        cached = self._engines.get(history.user_id)
        if cached is not None:
            self._engines.move_to_end(history.user_id)
            return cached
        units = dialogue_units(history)
        engine = build_engine(
            [u.messages for u in units], embedder=self.embedder(), config=memory_config(self.k)
        )
        cached = self._engines[history.user_id] = (units, engine)
        while len(self._engines) > max(1, self.options.max_cached_users):
            _, (_, old) = self._engines.popitem(last=False)
            old.close()
        return cached

    def rank(self, history: HiCupidHistory, query: str, k: int) -> list[HistoryUnit]:
        units, engine = self.engine(history)
        found = engine.retrieve(USER, query, k_sessions=k, k_memories=0)
        return [units[int(str(item.session.metadata["position"]))] for item in found.sessions if item.session]

    async def select(self, history: HiCupidHistory, qa: HiCupidQA) -> ContextSelection:
        ranked = self.rank(history, qa.question, self.k)
        shown = chronological(ranked)
        return ContextSelection(
            flatten(shown),
            tuple(u.dialogue_id for u in shown),
            tuple(u.dialogue_id for u in ranked),
        )

    def close(self) -> None:
        while self._engines:
            _, (_, engine) = self._engines.popitem(last=False)
            engine.close()


# --- offline report ----------------------------------------------------------------------------

Ranker = Callable[[HiCupidHistory, str, int], list[int]]


def recent_ranker(history: HiCupidHistory, query: str, k: int) -> list[int]:
    """The ``k`` most recent dialogues, newest first."""
    return list(reversed(history.dialogue_ids))[:k]


def _ranker(method: str, options: ContextOptions) -> tuple[Ranker, Callable[[], None]]:
    if method == "recent":
        return recent_ranker, lambda: None
    if method in ("bm25", "dense"):
        retriever = Retrieval(method, "dialogue", 1, options)  # type: ignore[arg-type]
        return (lambda h, q, k: [u.dialogue_id for u in retriever.rank(h, q, k)]), lambda: None
    if method == "memory":
        memory = MemoryContext(MEMORY_K, options)
        return (lambda h, q, k: [u.dialogue_id for u in memory.rank(h, q, k)]), memory.close
    raise ConfigError(f"unknown method {method!r} (known: {', '.join(HICUPID_METHODS)})")


def _precomputed(rankings: dict[str, list[int]]) -> Callable[[HiCupidHistory, HiCupidQA, int], list[int]]:
    return lambda history, qa, k: rankings[qa.id][:k]


def history_tokens(history: HiCupidHistory, dialogue_ids: Sequence[int]) -> int:
    """Approximate prompt tokens of the given dialogues as the history block (all when ids cover all)."""
    wanted = set(dialogue_ids)
    return sum(
        approx_tokens(m.content) for d in history.dialogues if d.dialogue_id in wanted for m in d.messages()
    )


def evaluate_hicupid(
    histories: dict[int, HiCupidHistory],
    questions: Sequence[HiCupidQA],
    *,
    ks: Sequence[int] = (1, 3, 5),
    options: ContextOptions | None = None,
    methods: Sequence[str] = HICUPID_METHODS,
) -> dict[str, Any]:
    """Hit@k of the gold dialogues per question type, and the retrieved history's size against the
    whole history (approximate tokens, mean ratio over questions), for each method and k.

    Dialogue-level retrieval throughout: ``bm25`` and ``dense`` are the HiCUPID dialogue settings,
    ``recent`` the last k dialogues, ``memory`` the engine's fused retrieval.
    """
    unknown = [m for m in methods if m not in HICUPID_METHODS]
    if unknown:
        raise ConfigError(f"unknown methods {unknown} (known: {', '.join(HICUPID_METHODS)})")
    if not ks or min(ks) <= 0:
        raise ConfigError("k values must be positive")
    options = options or ContextOptions()
    top = max(ks)
    out: dict[str, Any] = {}
    for method in methods:
        rank, close = _ranker(method, options)
        try:
            rankings = {qa.id: rank(histories[qa.user_id], qa.question, top) for qa in questions}
        finally:
            close()
        hits = hits_by_type(_precomputed(rankings), histories, questions, ks)
        for k, row in hits.items():
            ratios = []
            for qa in questions:
                history = histories[qa.user_id]
                full = history_tokens(history, history.dialogue_ids)
                ratios.append(history_tokens(history, rankings[qa.id][:k]) / full if full else 0.0)
            row["token_ratio"] = sum(ratios) / len(ratios) if ratios else None
        out[method] = hits
    return {
        "ks": list(ks),
        "embedder": options.embedder,
        "memory": memory_settings(MEMORY_K, options.embedder),
        "methods": out,
    }


HIT_COLUMNS = (
    ("persona", "persona"),
    ("schedule", "schedule"),
    ("multi-info persona", "multi_info_persona"),
    ("multi-info profile", "multi_info_profile"),
    ("total", "total"),
    ("tokens vs full", "token_ratio"),
)


def format_hicupid_table(summary: dict[str, Any]) -> str:
    """A markdown table: one row per method and k (Hit@k in %, token ratio as a fraction)."""
    caption = (
        f"HiCUPID dialogue retrieval Hit@k (%) per question type (embedder {summary['embedder']}); "
        "total = the paper's weighting; tokens vs full = retrieved history / whole history"
    )

    def cell(key: str, value: float | None) -> str:
        if value is None:
            return ""
        return f"{value:.3f}" if key == "token_ratio" else f"{100 * value:.1f}"

    rows = [
        [method, k, row["n"], *(cell(key, row.get(key)) for _, key in HIT_COLUMNS)]
        for method, by_k in summary["methods"].items()
        for k, row in by_k.items()
    ]
    return markdown_table(caption, ["method", "k", "n", *(c for c, _ in HIT_COLUMNS)], rows)


def memory_eval(
    data: str, *, k: int | None, embedder: str, methods: Sequence[str] | None
) -> MemoryEvalResult:
    """`personalign memory-eval --format hicupid` (the spec's `memory_eval` hook): Hit@k on the test
    splits, at the paper's dialogue k values (1, 3, 5) unless `k` is given."""
    hicupid = load_hicupid(data)
    summary = evaluate_hicupid(
        hicupid.histories,
        hicupid.questions(TEST_SPLITS),
        ks=PAPER_K["dialogue"] if k is None else (k,),
        options=ContextOptions(embedder=embedder),
        methods=tuple(methods or HICUPID_METHODS),
    )
    return MemoryEvalResult(hicupid.source, hicupid.sha256, summary, format_hicupid_table(summary))

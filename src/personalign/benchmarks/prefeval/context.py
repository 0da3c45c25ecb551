"""PrefEval settings: what the subject sees between the preference and the question.

The conversation is always the preference part (explicit: the user's statement and the subject's
own reply to it; choice-based: query, options, the user's pick, acknowledgment; persona-driven:
the persona's turns), then the first N distractor turns, then the question. The settings:

- ``zero-shot``: the question as it is (plus the answer-length limit);
- ``reminder``: a sentence asking to keep the earlier preference in mind is appended;
- ``cot``: five worked examples of preference-aware answers are prefixed;
- ``self-critic``: zero-shot answer, then a critique request, then a revision request (3 calls);
- ``rag``: the top-k messages of the conversation (BM25 or dense, each message one unit, ranked by
  the question) are quoted before the question; the whole conversation stays in context;
- ``memory``: the memory engine (`personalign.memory`) holds the conversation as sessions (the
  preference part, then one per distractor turn) and the k sessions it retrieves for the question
  replace the conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from personalign.benchmarks.prefeval.data import PrefEvalRow, distractor_turns
from personalign.benchmarks.prefeval.schema import ChatTurn, ChoiceRow, ExplicitRow, PersonaRow
from personalign.errors import ConfigError
from personalign.memory.strategy import USER, build_engine, shared_embedder
from personalign.retrieval import BM25Index, DenseIndex, Embedder
from personalign.types import Message

Setting = Literal["zero-shot", "reminder", "cot", "self-critic", "rag", "memory"]
SETTINGS: tuple[Setting, ...] = ("zero-shot", "reminder", "cot", "self-critic", "rag", "memory")
RagMethod = Literal["bm25", "dense"]
RAG_METHODS: tuple[RagMethod, ...] = ("bm25", "dense")
RAG_K = 5  # the paper's top-k
MEMORY_K = 3


def check_setting(setting: str) -> None:
    if setting not in SETTINGS:
        raise ConfigError(f"unknown PrefEval setting {setting!r} (choose from {', '.join(SETTINGS)})")


def preference_messages(row: PrefEvalRow, pref_response: str | None = None) -> list[Message]:
    """The part of the conversation that carries the preference, in the official order."""
    data = row.row
    if isinstance(data, ExplicitRow):
        if pref_response is None:
            raise ValueError(f"{row.id}: the explicit form needs the subject's reply to the preference")
        return [
            Message(role="user", content=data.preference),
            Message(role="assistant", content=pref_response),
        ]
    if isinstance(data, ChoiceRow):
        c = data.conversation
        return [
            Message(role="user", content=c.query),
            Message(role="assistant", content=c.assistant_options),
            Message(role="user", content=c.user_selection),
            Message(role="assistant", content=c.assistant_acknowledgment),
        ]
    if isinstance(data, PersonaRow):
        out: list[Message] = []
        for turn in data.conversation.values():
            out += [
                Message(role="user", content=turn.user),
                Message(role="assistant", content=turn.assistant),
            ]
        return out
    raise TypeError(f"unknown row type {type(data).__name__}")


def as_messages(turns: Sequence[ChatTurn]) -> list[Message]:
    return [Message(role=t.role, content=t.content) for t in turns]


def conversation(
    row: PrefEvalRow, distractors: Sequence[ChatTurn], turns: int, pref_response: str | None = None
) -> list[Message]:
    """Preference part, then the first ``turns`` distractor turns (user, assistant)."""
    return preference_messages(row, pref_response) + as_messages(distractor_turns(distractors, turns))


def unit_text(message: Message) -> str:
    """One retrieval unit: ``User: ...`` or ``Assistant: ...``."""
    return f"{message.role.capitalize()}: {message.content}"


@dataclass
class RagRanker:
    """Ranks the conversation's messages for a question. The distractor messages' vectors (the same
    for every instance) are encoded once per run; only the preference part is encoded per instance."""

    method: RagMethod = "bm25"
    embedder_spec: str = "minilm"
    _embedder: Embedder | None = None
    _distractor_vectors: dict[int, np.ndarray] = field(default_factory=dict)

    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = shared_embedder(self.embedder_spec)
        return self._embedder

    def rank(self, units: Sequence[str], query: str, k: int, *, shared_tail: Sequence[str] = ()) -> list[int]:
        """Positions of the ``k`` best units of ``units + shared_tail``, best first (ties: earlier first)."""
        texts = [*units, *shared_tail]
        if self.method == "bm25":
            return [h.index for h in BM25Index(texts).search(query, k)]
        embedder = self.embedder()
        key = len(shared_tail)
        tail = self._distractor_vectors.get(key)
        if tail is None and shared_tail:
            tail = self._distractor_vectors[key] = np.asarray(
                embedder.encode(list(shared_tail)), dtype=np.float32
            )
        head = np.asarray(embedder.encode(list(units)), dtype=np.float32)
        vectors = head if tail is None else np.vstack([head, tail])
        return [h.index for h in DenseIndex(embedder, vectors=vectors).search(query, k)]


def rag_excerpts(
    ranker: RagRanker, preference: Sequence[Message], distractors: Sequence[Message], question: str, k: int
) -> tuple[list[str], list[int]]:
    """The top-k messages (as ``Role: text``), best first, and their positions in the conversation."""
    units = [unit_text(m) for m in preference]
    tail = [unit_text(m) for m in distractors]
    ranked = ranker.rank(units, question, k, shared_tail=tail)
    texts = [*units, *tail]
    return [texts[i] for i in ranked], ranked


def sessions_of(preference: Sequence[Message], distractors: Sequence[Message]) -> list[list[Message]]:
    """Memory sessions: the preference part as one session, then one per distractor turn."""
    sessions = [list(preference)]
    for i in range(0, len(distractors), 2):
        sessions.append(list(distractors[i : i + 2]))
    return sessions


def memory_sessions(
    preference: Sequence[Message], distractors: Sequence[Message], question: str, k: int, embedder: str
) -> list[int]:
    """Positions (chronological) of the k sessions the memory engine retrieves for the question."""
    sessions = sessions_of(preference, distractors)
    engine = build_engine([list(s) for s in sessions], embedder=shared_embedder(embedder))
    try:
        found = engine.retrieve(USER, question, k_sessions=k, k_memories=0)
        positions = [int(str(item.session.metadata["position"])) for item in found.sessions if item.session]
    finally:
        engine.close()
    return sorted(positions)


def render_sessions(sessions: Sequence[Sequence[Message]]) -> str:
    """Retrieved sessions as text blocks, one message per line."""
    return "\n\n".join("\n".join(unit_text(m) for m in session) for session in sessions)

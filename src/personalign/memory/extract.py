"""Extraction of contextual memories from recorded sessions by any model, off the request path.

The model answers schema-constrained JSON (context factor, kind, category, content, evidence turns);
the parser is strict and an unusable answer is re-asked once, then recorded as an extraction error
for that session (never stored as an empty result). Calls go through the core's `Model`, so they are
cached: re-extracting a store with the same model and prompt costs no calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from personalign.errors import ParseError
from personalign.judges.parsing import extract_json, require_object
from personalign.llm import CallCache, GenerateConfig, Model, ModelFactory, default_cache_path
from personalign.memory.backend import DEFAULT_TENANT, MemoryBackend
from personalign.memory.stores import open_store
from personalign.memory.types import MEMORY_KINDS, StoredSession
from personalign.prompts import load_template
from personalign.runs.steps import StepFailed, StepRunner

TEMPLATE = "memory/extract"
MAX_MEMORIES = 5

EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "maxItems": MAX_MEMORIES,
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": list(MEMORY_KINDS)},
                    "context_factor": {"type": "string"},
                    "category": {"type": "string"},
                    "content": {"type": "string"},
                    "evidence_turns": {"type": "array", "items": {"type": "integer"}},
                },
                "required": ["kind", "context_factor", "category", "content", "evidence_turns"],
            },
        }
    },
    "required": ["memories"],
}


def format_transcript(session: StoredSession) -> str:
    return "\n\n".join(f"[{t.index}] {t.role}: {t.content.strip()}" for t in session.turns)


def parse_extraction(text: str, n_turns: int) -> list[dict[str, Any]]:
    """The memories in an extraction answer; raises ParseError on anything off-schema."""
    data = require_object(extract_json(text), "extraction")
    items = data.get("memories")
    if not isinstance(items, list):
        raise ParseError("extraction: 'memories' must be a list")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items[:MAX_MEMORIES]):
        item = require_object(item, f"extraction memory {i}")
        kind, content = item.get("kind"), item.get("content")
        if kind not in MEMORY_KINDS:
            raise ParseError(f"extraction memory {i}: kind must be one of {', '.join(MEMORY_KINDS)}")
        if not isinstance(content, str) or not content.strip():
            raise ParseError(f"extraction memory {i}: empty content")
        factor, category = item.get("context_factor", ""), item.get("category", "")
        if not isinstance(factor, str) or not isinstance(category, str):
            raise ParseError(f"extraction memory {i}: context_factor and category must be strings")
        turns = item.get("evidence_turns", [])
        if not isinstance(turns, list) or not all(isinstance(t, int) for t in turns):
            raise ParseError(f"extraction memory {i}: evidence_turns must be a list of turn numbers")
        bad = [t for t in turns if not 0 <= t < n_turns]
        if bad:
            raise ParseError(f"extraction memory {i}: turns {bad} do not exist (0..{n_turns - 1})")
        out.append(
            {
                "kind": kind,
                "context_factor": factor.strip(),
                "category": category.strip().lower() or "general",
                "content": content.strip(),
                "evidence_turns": sorted(set(turns)),
            }
        )
    return out


def extractor_id(model: Model) -> str:
    """Names who extracted: the model and the prompt version (a new prompt re-extracts)."""
    return f"{model.label}|{load_template(TEMPLATE).sha256[:12]}"


async def extract_session(
    model: Model, session: StoredSession, *, max_tokens: int = 600, reasks: int = 1
) -> list[dict[str, Any]]:
    """Ask ``model`` for one session's memories; raises StepFailed with the reason on failure."""
    steps = StepRunner()
    result: list[dict[str, Any]] = await steps.call(
        "extract",
        role="extractor",
        model=model,
        template=load_template(TEMPLATE),
        values={"transcript": format_transcript(session)},
        config=GenerateConfig(
            temperature=0.0, max_tokens=max_tokens, json_schema=EXTRACTION_SCHEMA, schema_name="memories"
        ),
        parse=lambda text: parse_extraction(text, len(session.turns)),
        reasks=reasks,
    )
    return result


@dataclass
class ExtractionReport:
    """What one extraction pass did for one user."""

    user_id: str
    extractor: str
    sessions: int = 0
    memories: int = 0
    errors: dict[int, str] = field(default_factory=dict)


async def extract_pending(
    store: MemoryBackend, user_id: str, model: Model, *, concurrency: int = 4, max_tokens: int = 600
) -> ExtractionReport:
    """Extract every session of ``user_id`` that ``model`` has not yet extracted successfully.

    Calls run concurrently; results are written oldest session first, each session's memories and
    its extraction record in one transaction, so newer preferences supersede older ones in order.
    """
    extractor = extractor_id(model)
    pending = set(store.pending_extraction(user_id, extractor))
    sessions = [s for s in store.sessions(user_id) if s.id in pending]
    report = ExtractionReport(user_id, extractor)
    gate = asyncio.Semaphore(concurrency)

    async def one(session: StoredSession) -> list[dict[str, Any]] | str:
        async with gate:
            try:
                return await extract_session(model, session, max_tokens=max_tokens)
            except StepFailed as exc:
                return str(exc)

    results = await asyncio.gather(*(one(s) for s in sessions))
    for session, result in zip(sessions, results, strict=True):
        if isinstance(result, str):
            store.record_extraction_error(user_id, session.id, extractor, result)
            report.errors[session.id] = result
            continue
        store.add_memories(user_id, result, session_id=session.id, source=model.label, extractor=extractor)
        report.sessions += 1
        report.memories += len(result)
    return report


T = TypeVar("T")


class BackgroundExtractor:
    """Runs extraction in a worker thread with its own event loop and its own store connection.

    ``submit(user_id)`` returns at once with a future of the :class:`ExtractionReport`; the request
    path never waits for a model. Close it (or use it as a context manager) to finish and stop.
    """

    def __init__(
        self,
        store_path: str | Path,
        model: str,
        *,
        cache_path: str | Path | None = None,
        factory: ModelFactory | None = None,
        concurrency: int = 4,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memory-extractor", daemon=True)
        self._thread.start()
        self.store = open_store(store_path, tenant=tenant)
        self._own_factory = factory is None
        self.factory = factory or ModelFactory(cache=CallCache(cache_path or default_cache_path()))
        self.model = self.factory.get(model)
        self.concurrency = concurrency
        self._futures: list[concurrent.futures.Future[Any]] = []

    def _run(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._futures.append(future)
        return future

    def submit(self, user_id: str) -> concurrent.futures.Future[ExtractionReport]:
        return self._run(extract_pending(self.store, user_id, self.model, concurrency=self.concurrency))

    def wait(self, timeout: float | None = None) -> None:
        """Block until every submitted extraction has finished."""
        concurrent.futures.wait(list(self._futures), timeout=timeout)

    def close(self) -> None:
        self.wait()
        asyncio.run_coroutine_threadsafe(self.factory.aclose(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self.store.close()
        if self._own_factory and self.factory.cache is not None:
            self.factory.cache.close()

    def __enter__(self) -> BackgroundExtractor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

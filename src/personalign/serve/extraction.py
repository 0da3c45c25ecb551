"""Background extraction for the gateway: a worker thread with its own event loop and models.

``submit(user)`` only enqueues (coalescing repeats of a user already waiting) and returns at once,
so a chat request never waits on extraction. Each job runs `extract_pending` for that user: the
sessions the extractor has not processed yet; failures are recorded per session by the engine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from personalign.llm import ModelFactory
from personalign.memory.backend import MemoryBackend, UnknownUserError
from personalign.memory.extract import extract_pending
from personalign.serve.observe import log_event


class ExtractionWorker:
    """Runs extraction jobs off the request path; ``stats`` counts queued, done and failed jobs."""

    def __init__(
        self,
        view: Callable[[str], MemoryBackend],
        model_spec: str,
        *,
        workers: int = 2,
        factory: Callable[[], ModelFactory] | None = None,
    ) -> None:
        self.view = view  # tenant -> the store bound to it
        self.model_spec = model_spec
        self.stats = {"queued": 0, "done": 0, "failed": 0, "memories": 0}
        self._pending: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running = 0
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[tuple[str, str] | None] | None = None
        self._make_factory = factory or (lambda: ModelFactory(cache=None))
        self._workers = workers
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(workers,), name="gateway-extractor", daemon=True
        )
        self._thread.start()
        self._ready.wait()

    def _main(self, workers: int) -> None:
        asyncio.set_event_loop(self._loop)
        self._queue = asyncio.Queue()
        self._factory = self._make_factory()
        self._model = self._factory.get(self.model_spec)
        tasks = [self._loop.create_task(self._consume()) for _ in range(workers)]
        self._ready.set()
        self._loop.run_until_complete(asyncio.gather(*tasks))
        self._loop.run_until_complete(self._factory.aclose())
        self._loop.close()

    def submit(self, tenant: str, user: str) -> bool:
        """Queue extraction for a tenant's user; False when that user is already waiting (coalesced)."""
        job = (tenant, user)
        with self._lock:
            if job in self._pending:
                return False
            self._pending.add(job)
            self.stats["queued"] += 1
        assert self._queue is not None
        self._loop.call_soon_threadsafe(self._queue.put_nowait, job)
        return True

    @property
    def backlog(self) -> int:
        with self._lock:
            return len(self._pending) + self._running

    async def _consume(self) -> None:
        assert self._queue is not None
        while True:
            job = await self._queue.get()
            if job is None:
                return
            with self._lock:
                self._pending.discard(job)
                self._running += 1
            try:
                report = await extract_pending(self.view(job[0]), job[1], self._model)
            except UnknownUserError:
                outcome, n = "done", 0  # the user was deleted meanwhile: nothing to do
            except Exception as exc:
                log_event("extraction_failed", error=type(exc).__name__)
                outcome, n = "failed", 0
            else:
                outcome, n = "done", report.memories
            with self._idle:
                self.stats[outcome] += 1
                self.stats["memories"] += n
                self._running -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no job is queued or running (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._pending and not self._running, timeout)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        assert self._queue is not None
        for _ in range(self._workers):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
        self._thread.join(timeout=60)

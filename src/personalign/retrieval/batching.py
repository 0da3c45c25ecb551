"""Micro-batching of single-text encodings requested from many threads at once (the gateway's queries).

A caller that finds the embedder idle encodes its text at once (one client waits for nothing);
texts that arrive while an encoding runs queue up and are encoded together in the next call, by
the first of their callers, so concurrent requests share one model call instead of queueing for
the model one by one. Each caller gets the row of its own text.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from personalign.retrieval.dense import Embedder, Matrix


class _Slot:
    __slots__ = ("error", "lead", "ready", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: npt.NDArray[np.float32] | None = None
        self.error: BaseException | None = None
        self.lead = False  # this caller runs the next batch
        self.ready = threading.Event()


class QueryBatcher:
    """``encode_one`` from any thread; texts queued while an encode runs go in the next batch
    (at most ``max_batch``). ``batches`` counts the model calls made."""

    def __init__(self, embedder: Embedder, *, max_batch: int = 64) -> None:
        self.embedder = embedder
        self.name, self.dim = embedder.name, embedder.dim
        self.max_batch = max(1, max_batch)
        self.batches = 0
        self._queue: list[_Slot] = []
        self._busy = False
        self._lock = threading.Lock()
        # an embedder's own entry for batches of queries (MiniLM: its one-thread session), if any
        self._encode_queries: Callable[[Sequence[str]], Matrix] = getattr(
            embedder, "encode_queries", embedder.encode
        )

    def encode(self, texts: Sequence[str]) -> Matrix:
        """Several texts (one call of the embedder, not batched with others)."""
        return self.embedder.encode(texts)

    def encode_one(self, text: str) -> npt.NDArray[np.float32]:
        """``text``'s row, encoded alone or together with the texts queued with it."""
        slot = _Slot(text)
        with self._lock:
            self._queue.append(slot)
            if not self._busy:
                self._busy = slot.lead = True
        if not slot.lead:
            slot.ready.wait()  # encoded by another caller's batch, or promoted to run the next one
        if slot.lead:
            self._run()
        if slot.error is not None:
            raise slot.error
        assert slot.vector is not None
        return slot.vector

    def _run(self) -> None:
        """Encode the queued texts (the leader's among them), then hand the lead to a waiting caller."""
        with self._lock:
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            self.batches += 1
        try:
            rows = self._encode_queries([s.text for s in batch])
            for n, slot in enumerate(batch):
                slot.vector = rows[n]
        except BaseException as exc:  # every caller of the batch sees the failure
            for slot in batch:
                slot.error = exc
        finally:
            with self._lock:
                successor = self._queue[0] if self._queue else None
                if successor is not None:
                    successor.lead = True
                else:
                    self._busy = False
            for slot in batch:
                slot.lead = False
                slot.ready.set()
            if successor is not None:
                successor.ready.set()

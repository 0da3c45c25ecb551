"""Micro-batching of concurrent query encodings (the gateway's QueryBatcher)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from personalign.retrieval import HashingEmbedder
from personalign.retrieval.batching import QueryBatcher
from personalign.retrieval.dense import Matrix
from personalign.serve.tenancy import MemoryService


class SlowEmbedder:
    """The hashing embedder, recording every call's batch, slow enough for callers to queue up."""

    def __init__(self, delay: float = 0.05, fail_on: str | None = None) -> None:
        self.inner = HashingEmbedder(64)
        self.name, self.dim = self.inner.name, self.inner.dim
        self.calls: list[list[str]] = []
        self.delay = delay
        self.fail_on = fail_on
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Matrix:
        with self._lock:
            self.calls.append(list(texts))
        time.sleep(self.delay)
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model failed")
        return self.inner.encode(texts)


def encode_at_once(encode: object, texts: list[str]) -> dict[str, object]:
    """Each text encoded by its own thread, all started together; text -> vector or exception."""
    out: dict[str, object] = {}
    start = threading.Barrier(len(texts))

    def run(text: str) -> None:
        start.wait()
        try:
            out[text] = encode(text)  # type: ignore[operator]
        except Exception as exc:
            out[text] = exc

    threads = [threading.Thread(target=run, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


TEXTS = [f"query number {i} about the Lisbon trip and item {i * 7}" for i in range(12)]


def test_concurrent_queries_share_model_calls_and_each_caller_gets_its_own_row() -> None:
    slow = SlowEmbedder()
    batcher = QueryBatcher(slow)
    got = encode_at_once(batcher.encode_one, TEXTS)
    assert len(slow.calls) < len(TEXTS)  # one model call per query before
    assert sorted(t for call in slow.calls for t in call) == sorted(TEXTS)  # each text encoded once
    assert max(len(call) for call in slow.calls) > 1
    for text in TEXTS:
        np.testing.assert_array_equal(got[text], slow.inner.encode([text])[0])
    assert batcher.batches == len(slow.calls)


def test_a_lone_query_is_encoded_at_once_alone() -> None:
    slow = SlowEmbedder(delay=0.0)
    batcher = QueryBatcher(slow)
    for text in TEXTS[:3]:
        np.testing.assert_array_equal(batcher.encode_one(text), slow.inner.encode([text])[0])
    assert slow.calls == [[t] for t in TEXTS[:3]]


def test_a_failed_batch_fails_its_callers_and_the_next_batch_still_runs() -> None:
    slow = SlowEmbedder(fail_on=TEXTS[0])
    batcher = QueryBatcher(slow)
    got = encode_at_once(batcher.encode_one, TEXTS)
    failed = [t for t in TEXTS if isinstance(got[t], RuntimeError)]
    assert TEXTS[0] in failed
    for call in slow.calls:  # exactly the callers batched with the failing text failed
        assert all((t in failed) == (TEXTS[0] in call) for t in call)
    slow.fail_on = None
    np.testing.assert_array_equal(batcher.encode_one("after"), slow.inner.encode(["after"])[0])


def test_the_gateway_encodes_concurrent_requests_queries_together(tmp_path: object) -> None:
    slow = SlowEmbedder()
    service = MemoryService(":memory:", embedder=slow)
    try:
        got = encode_at_once(service.encode, TEXTS)
    finally:
        service.close()
    assert len(slow.calls) < len(TEXTS)
    for text in TEXTS:
        np.testing.assert_array_equal(got[text], slow.inner.encode([text])[0])


@pytest.mark.parametrize("max_batch", [1, 3])
def test_batches_are_capped(max_batch: int) -> None:
    slow = SlowEmbedder(delay=0.02)
    batcher = QueryBatcher(slow, max_batch=max_batch)
    got = encode_at_once(batcher.encode_one, TEXTS)
    assert max(len(call) for call in slow.calls) <= max_batch
    assert all(isinstance(got[t], np.ndarray) for t in TEXTS)

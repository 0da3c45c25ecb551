"""Model backends behind one async interface (`Backend`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from personalign.llm.types import BackendResponse, GenerateConfig
from personalign.types import Message


@runtime_checkable
class Backend(Protocol):
    """One provider's way of answering a chat request.

    `generate` makes exactly one attempt. It raises `ModelCallError` on failure, with
    `retryable` set for transient faults (429, 5xx, timeouts, resets, garbage bodies) and
    `retry_after` when the server said how long to wait. Retries, caching and limits are the
    `Model` wrapper's job, not the backend's.
    """

    supports_json_schema: bool

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse: ...

    async def aclose(self) -> None: ...

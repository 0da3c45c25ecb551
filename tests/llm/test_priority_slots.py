"""Freed model slots go to the calls of instances that are further along."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from personalign.llm.backends.scripted import ScriptedBackend
from personalign.llm.model import PrioritySlots, call_priority
from personalign.llm.types import BackendResponse, GenerateConfig
from personalign.types import Message
from tests.support.models import run, scripted_model


def test_a_freed_slot_goes_to_the_highest_priority_then_the_oldest_waiter() -> None:
    async def scenario() -> list[str]:
        slots = PrioritySlots(1)
        order: list[str] = []
        await slots.acquire()  # held by the test

        async def waiter(name: str, priority: int) -> None:
            await slots.acquire(priority)
            order.append(name)
            slots.release()

        tasks = []
        for name, priority in [("a0", 0), ("b0", 0), ("c2", 2), ("d1", 1)]:
            tasks.append(asyncio.create_task(waiter(name, priority)))
            await asyncio.sleep(0)  # queue in this order
        slots.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["c2", "d1", "a0", "b0"]


def test_cancelled_waiters_never_keep_a_slot() -> None:
    async def scenario() -> tuple[list[str], int]:
        slots = PrioritySlots(1)
        order: list[str] = []
        await slots.acquire()

        async def waiter(name: str, priority: int) -> None:
            await slots.acquire(priority)
            order.append(name)
            slots.release()

        skipped = asyncio.create_task(waiter("cancelled-while-waiting", 5))
        handed = asyncio.create_task(waiter("cancelled-after-handover", 4))
        last = asyncio.create_task(waiter("last", 0))
        await asyncio.sleep(0)
        skipped.cancel()
        await asyncio.sleep(0)
        slots.release()  # handed to "cancelled-after-handover", which is cancelled before it runs
        handed.cancel()
        await asyncio.gather(skipped, handed, return_exceptions=True)
        await last
        return order, slots._free

    order, free = asyncio.run(scenario())
    assert order == ["last"] and free == 1


class GatedBackend(ScriptedBackend):
    """Holds the first call until released; records the order in which calls reach the backend."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self.gate = asyncio.Event()

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        self.order.append(messages[-1].content)
        if len(self.order) == 1:
            await self.gate.wait()
        return await super().generate(messages, config, timeout=timeout)


def test_model_calls_queue_by_the_priority_of_their_task(tmp_path: Path) -> None:
    backend = GatedBackend()
    factory, model = scripted_model(tmp_path, backend, spec="scripted/x?concurrency=1")

    async def call(text: str, priority: int) -> None:
        with call_priority(priority):
            await model.complete([Message(role="user", content=text)])

    async def scenario() -> None:
        first = asyncio.create_task(call("first", 0))
        await asyncio.sleep(0.01)
        rest = [asyncio.create_task(call(t, p)) for t, p in [("new-a", 0), ("step-3", 3), ("new-b", 0)]]
        await asyncio.sleep(0.01)
        backend.gate.set()
        await asyncio.gather(first, *rest)

    run(factory, scenario())
    assert backend.order == ["first", "step-3", "new-a", "new-b"]

"""A rejected reply (unparseable, truncated, empty) is never scored and never served again from the
cache; the finish reason of every reply is recorded and counted per step in the summary."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.errors import ParseError
from personalign.llm import CallCache
from personalign.llm.backends.scripted import ScriptedBackend, default_responder
from personalign.llm.types import BackendResponse, GenerateConfig
from personalign.runs.records import StepRecord
from personalign.runs.steps import UNFINISHED, StepFailed, StepRunner, gather_steps
from personalign.types import Message
from tests.support.models import run, scripted_model
from tests.support.stub_server import FaultPlan, StubServer

MESSAGES = [Message(role="user", content="Say a number.")]
CONFIG = GenerateConfig(max_tokens=16)


def _number(text: str) -> int:
    if not text.strip().isdigit():
        raise ParseError(f"not a number: {text!r}")
    return int(text)


def test_unparseable_reply_is_evicted_so_a_rerun_asks_again(tmp_path: Path) -> None:
    replies = iter(["garbage", "42"])
    backend = ScriptedBackend(lambda m, c: next(replies))
    factory, model = scripted_model(tmp_path, backend)

    async def once() -> int:
        return await StepRunner().call_messages(
            "n", role="judge", model=model, messages=MESSAGES, config=CONFIG, parse=_number
        )

    with pytest.raises(StepFailed, match="unparseable output"):
        asyncio.run(once())
    assert factory.cache is not None and len(factory.cache) == 0  # the bad reply is not kept
    assert run(factory, once()) == 42
    assert backend.calls == 2


def test_bad_reply_already_in_the_cache_is_replaced_by_a_fresh_call(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda m, c: "7")
    factory, model = scripted_model(tmp_path, backend)
    # An entry stored by an older version (or by a process killed before it could evict it).
    from personalign.llm.cache import cache_key

    assert factory.cache is not None
    factory.cache.put(cache_key(model.label, MESSAGES, CONFIG), model.label, {"text": "junk", "usage": {}})
    runner = StepRunner()
    value = asyncio.run(
        runner.call_messages("n", role="judge", model=model, messages=MESSAGES, config=CONFIG, parse=_number)
    )
    factory.cache.close()
    record = runner.steps["n"]
    assert value == 7 and backend.calls == 1
    assert record.raw == ["junk", "7"] and "refreshed" in record.flags
    assert record.errors and "cached reply rejected" in record.errors[0]


def _truncating(messages: Sequence[Message], config: GenerateConfig) -> str | BackendResponse:
    text = default_responder(messages, config)
    if "Most Likely Preference" in messages[-1].content:  # the subject's inference step
        return BackendResponse(text=text[: len(text) // 2], finish_reason="length")
    return text


@pytest.mark.parametrize("rule", ["error", "score"])
def test_truncated_reply_follows_the_protocol_rule(tmp_path: Path, rule: str) -> None:
    backend = ScriptedBackend(lambda m, c: BackendResponse(text="12", finish_reason="length"))
    factory, model = scripted_model(tmp_path, backend)
    runner = StepRunner(truncation=rule)  # type: ignore[arg-type]

    coro = runner.call_messages(
        "n", role="judge", model=model, messages=MESSAGES, config=CONFIG, parse=_number
    )
    if rule == "error":
        with pytest.raises(StepFailed, match="cut off at the token limit"):
            asyncio.run(coro)
        assert factory.cache is not None and len(factory.cache) == 0
    else:
        assert asyncio.run(coro) == 12  # scored on the text it got, as the paper's code does
    record = runner.steps["n"]
    assert record.finish_reasons == ["length"] and "truncated" in record.flags
    assert factory.cache is not None
    factory.cache.close()


def test_empty_reply_is_an_error_not_a_score(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda m, c: "")
    factory, model = scripted_model(tmp_path, backend)
    runner = StepRunner()

    with pytest.raises(StepFailed, match="empty reply"):
        asyncio.run(
            runner.call_messages(
                "g", role="subject", model=model, messages=MESSAGES, config=CONFIG, parse=str
            )
        )
    assert runner.steps["g"].status == "error" and "empty" in runner.steps["g"].flags
    assert factory.cache is not None
    factory.cache.close()


def test_inline_reasoning_is_stripped_before_parsing_and_kept(tmp_path: Path) -> None:
    backend = ScriptedBackend(lambda m, c: "<think>Six times seven.</think>\n42")
    factory, model = scripted_model(tmp_path, backend)
    runner = StepRunner()

    value = asyncio.run(
        runner.call_messages("n", role="judge", model=model, messages=MESSAGES, config=CONFIG, parse=_number)
    )
    record = runner.steps["n"]
    assert value == 42
    assert record.raw == ["<think>Six times seven.</think>\n42"]
    assert record.reasoning == ["<think>Six times seven.</think>"]
    assert "inline_reasoning" in record.flags and record.finish_reasons == ["stop"]
    assert factory.cache is not None
    factory.cache.close()


def _settings(tmp_path: Path, spec: str, name: str) -> RunSettings:
    return RunSettings(
        run_dir=tmp_path / name, cache_path=tmp_path / "cache.sqlite", progress=False, concurrency=4, limit=3
    )


def test_a_server_that_answers_garbage_then_heals_is_retried_on_rerun(tmp_path: Path) -> None:
    """The issue's reproduction: the first run records errors, the re-run asks again (not
    "calls 0 · cache hits 4") and ends complete, with the earlier failures kept per step."""
    with StubServer(faults=FaultPlan(sequence=["garbage_content"] * 12)) as srv:
        spec = f"openai-compat/stub@{srv.base_url}"
        config = CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=spec, reasks=0)
        settings = _settings(tmp_path, spec, "run")
        first = run_cupid(config, settings)
        assert first.outcome.status == "complete_with_errors"
        assert sum(step["errors"] for step in first.summary["steps"].values()) >= 1
        srv.faults = FaultPlan()  # the server heals
        requests_before = srv.stats.requests
        second = run_cupid(config, settings)
        assert srv.stats.requests > requests_before
        assert second.outcome.status == "complete"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "complete"
    records = second.outcome.records.values()
    assert any(step.errors for r in records for step in r.steps.values())


def test_truncated_subject_replies_are_counted_in_the_summary(tmp_path: Path) -> None:
    with StubServer(responder=_truncating) as srv:
        spec = f"openai-compat/stub@{srv.base_url}"
        config = CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=spec)
        result = run_cupid(config, _settings(tmp_path, spec, "trunc"))
    infer = result.summary["steps"]["infer"]
    assert infer["steps"] == 3 and infer["truncated"] == 3 and infer["errors"] == 3
    assert result.outcome.status == "complete_with_errors"
    for record in result.outcome.records.values():
        assert record.steps["infer"].finish_reasons == ["length"]
        assert record.results["inference"].status == "error"


def test_claims_stop_a_second_process_from_paying_for_the_same_call(tmp_path: Path) -> None:
    first, second = CallCache(tmp_path / "c.sqlite"), CallCache(tmp_path / "c.sqlite")
    assert first.claim("k", ttl=60) is True
    first.flush()
    assert second.claim("k", ttl=60) is False  # a live holder: wait for its answer
    first.put("k", "m", {"text": "done", "usage": {}})
    first.flush()
    assert second.claim("k", ttl=60) == {"text": "done", "usage": {}}
    first.close()
    second.close()


def test_a_claim_of_a_dead_process_or_an_expired_one_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    cache = CallCache(tmp_path / "c.sqlite")
    conn = sqlite3.connect(tmp_path / "c.sqlite")
    conn.execute("INSERT INTO claims VALUES ('dead', ?, 9e18)", (f"{socket.gethostname()}|{pid}|x",))
    conn.execute("INSERT INTO claims VALUES ('old', 'elsewhere|1|x', 0)")
    conn.execute("INSERT INTO claims VALUES ('live', 'elsewhere|1|x', 9e18)")
    conn.commit()
    conn.close()
    assert cache.claim("dead", ttl=60) is True
    assert cache.claim("old", ttl=60) is True
    assert cache.claim("live", ttl=60) is False
    cache.close()


class _Gated(ScriptedBackend):
    """Answers "slow" only once `gate` is set, "fast" at once (with a reply no parser accepts)."""

    def __init__(self) -> None:
        super().__init__(lambda m, c: "bad" if m[-1].content == "fast" else "7")
        self.gate: asyncio.Event | None = None

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        if messages[-1].content == "slow":
            assert self.gate is not None
            await self.gate.wait()
        return await super().generate(messages, config, timeout=timeout)


def test_a_step_still_running_when_its_instance_fails_is_called_again_on_rerun(tmp_path: Path) -> None:
    """Found by the fault campaign: CUPID's two matcher steps run side by side; when one failed, the
    instance was written with the other still waiting for its reply, as status ok with no value,
    and the re-run reused that None (a crash, or a wrong number) instead of calling again."""
    backend = _Gated()
    factory, model = scripted_model(tmp_path, backend)
    runner = StepRunner()
    written: dict[str, StepRecord] = {}

    def step(name: str) -> Coroutine[Any, Any, int]:
        messages = [Message(role="user", content=name)]
        return runner.call_messages(
            name, role="matcher", model=model, messages=messages, config=CONFIG, parse=_number
        )

    async def instance() -> None:
        backend.gate = asyncio.Event()
        try:
            await asyncio.gather(step("slow"), step("fast"))
        except StepFailed:  # the instance's record is written now, as the benchmarks do
            written.update({k: v.model_copy(deep=True) for k, v in runner.steps.items()})

    asyncio.run(instance())
    assert written["fast"].status == "error"
    assert written["slow"].status == "error" and written["slow"].error == UNFINISHED

    rerun = StepRunner(previous=written)

    async def again() -> int:
        backend.gate = asyncio.Event()
        backend.gate.set()
        return await rerun.call_messages(
            "slow",
            role="matcher",
            model=model,
            messages=[Message(role="user", content="slow")],
            config=CONFIG,
            parse=_number,
        )

    assert run(factory, again()) == 7
    assert rerun.steps["slow"].status == "ok" and rerun.steps["slow"].errors == [UNFINISHED]


def test_an_ok_model_step_without_a_reply_is_not_reused() -> None:
    """Records written before the fix hold such steps; they are called again, not reused."""
    unanswered = StepRecord(role="matcher", model="scripted/x", status="ok")
    decided = StepRecord(role="matcher", parsed=[], flags=["empty_inference"])
    context = StepRecord(role="context", model="scripted/j", parsed={"prompt": "p"})  # no call of its own
    runner = StepRunner(previous={"a": unanswered, "b": decided, "c": context})
    assert runner.reuse("a") is None
    assert runner.reuse("b") is decided
    assert runner.reuse("c") is context


def test_gather_steps_records_the_sibling_of_a_failed_step_before_raising(tmp_path: Path) -> None:
    """With `gather_steps` (CUPID's two matcher directions, HiCUPID's two judge orders) a failed
    step no longer leaves its sibling running unawaited: the sibling's reply is in the record when
    the failure reaches the instance, and nothing is still running afterwards."""
    backend = _Gated()
    _, model = scripted_model(tmp_path, backend)
    runner = StepRunner()

    def step(name: str) -> Coroutine[Any, Any, int]:
        messages = [Message(role="user", content=name)]
        return runner.call_messages(
            name, role="matcher", model=model, messages=messages, config=CONFIG, parse=_number
        )

    async def instance() -> tuple[dict[str, StepRecord], int]:
        backend.gate = asyncio.Event()
        gate = backend.gate
        asyncio.get_running_loop().call_later(0.05, gate.set)  # "slow" answers after "fast" failed
        with pytest.raises(StepFailed, match="fast"):
            await gather_steps(step("slow"), step("fast"))
        written = {k: v.model_copy(deep=True) for k, v in runner.steps.items()}
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return written, len(others)

    written, still_running = asyncio.run(instance())
    assert written["fast"].status == "error"
    assert written["slow"].status == "ok" and written["slow"].parsed == 7
    assert still_running == 0

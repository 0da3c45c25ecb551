"""Batch API clients: the result parser, the journal and the runner against a fake batch endpoint."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from personalign.errors import ConfigError, ModelCallError
from personalign.llm import CallCache, GenerateConfig, Model, ModelFactory, UsageTracker
from personalign.llm.batch import (
    BatchItem,
    BatchJournal,
    BatchOutcome,
    BatchPending,
    BatchRunner,
    PollPolicy,
    accept_results,
    batch_provider,
    batch_request,
    match_results,
)
from personalign.llm.batch.openai import OpenAIBatchProvider
from personalign.llm.pricing import Price, PriceTable
from personalign.llm.types import BackendResponse, Usage
from personalign.types import Message
from tests.support.batch_server import BatchFaults, BatchServer

ROOT = Path(__file__).resolve().parents[2]
FAST = PollPolicy(initial=0.05, factor=1.5, maximum=0.2)
PRICES = PriceTable({"m": Price(2.0, 8.0)}, "test")

# --- the result parser (pure) ------------------------------------------------------------------


def _parse(data: Any) -> BatchItem:
    if "error" in data:
        return BatchItem(data["custom_id"], error=data["error"], retryable=data.get("retry", False))
    return BatchItem(data["custom_id"], response=BackendResponse(text=data["text"]))


def test_results_map_back_by_custom_id_whatever_the_order_and_damage() -> None:
    expected = ["a", "b", "c", "d", "e"]
    lines = [
        json.dumps({"custom_id": "c", "text": "answer c"}),
        json.dumps({"custom_id": "a", "text": "answer a"}),  # out of order
        "{broken",  # malformed
        json.dumps({"custom_id": "zz", "text": "who?"}),  # unknown
        json.dumps({"custom_id": "b", "error": "HTTP 400: bad"}),  # per-request error
        json.dumps({"custom_id": "b", "text": "answer b"}),  # duplicate: the answer wins
        json.dumps({"custom_id": "a", "error": "late"}),  # duplicate: an error never replaces an answer
        json.dumps({"text": "no id"}),  # malformed: no custom_id
        "",
    ]
    report = match_results(expected, lines, _parse)
    assert {cid: item.response.text for cid, item in report.items.items() if item.response} == {
        "a": "answer a",
        "b": "answer b",
        "c": "answer c",
    }
    assert report.missing == ["d", "e"]
    assert report.unknown == ["zz"]
    assert report.duplicates == ["b", "a"]
    assert report.malformed == [3, 8]
    assert report.out_of_order == 2  # a after c; b after c


def test_an_error_line_is_reported_against_its_own_request() -> None:
    report = match_results(["x", "y"], [json.dumps({"custom_id": "y", "error": "boom"})], _parse)
    assert report.items["y"].error == "boom" and not report.items["y"].ok
    assert report.missing == ["x"]


# --- pricing ------------------------------------------------------------------------------------


def test_batch_calls_cost_half_unless_the_table_says_otherwise(tmp_path: Path) -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    assert Price(2.0, 8.0).cost(usage) == 10.0
    assert Price(2.0, 8.0).cost(usage, batch=True) == 5.0
    table = tmp_path / "prices.json"
    table.write_text(
        json.dumps(
            {
                "_batch_multiplier": 0.4,
                "m1": {"input": 2.0, "output": 8.0},
                "m2": {"input": 2.0, "output": 8.0, "batch_input": 1.5, "batch_output": 3.0},
            }
        )
    )
    prices = PriceTable.load(table)
    spec1 = ModelFactory(cache=None, prices=prices).get("openai-compat/m1@http://127.0.0.1:9/v1").spec
    spec2 = ModelFactory(cache=None, prices=prices).get("openai-compat/m2@http://127.0.0.1:9/v1").spec
    assert prices.cost(spec1, usage, batch=True) == pytest.approx(4.0)
    assert prices.cost(spec2, usage, batch=True) == pytest.approx(4.5)
    table.write_text(json.dumps({"_batch_multiplier": 2}))
    with pytest.raises(ConfigError, match="_batch_multiplier"):
        PriceTable.load(table)


def test_providers_without_a_batch_api_are_refused() -> None:
    model = ModelFactory(cache=None).get("scripted/x")
    with pytest.raises(ConfigError, match="no batch API"):
        batch_provider(model.spec)


# --- against the fake batch endpoint -----------------------------------------------------------


def _questions(n: int) -> list[list[Message]]:
    return [[Message(role="user", content=f"question {i}")] for i in range(n)]


async def _run_batch(
    model: Model, journal_dir: Path, n: int, *, max_attempts: int = 3
) -> tuple[BatchOutcome, list[str]]:
    provider = batch_provider(model.spec)
    runner = BatchRunner(
        provider, BatchJournal(journal_dir, provider.name), poll=FAST, max_attempts=max_attempts
    )
    requests = [batch_request(model, q, GenerateConfig()) for q in _questions(n)]
    try:
        return await runner.run(requests), [r.custom_id for r in requests]
    finally:
        await provider.aclose()


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_every_answer_lands_on_its_own_request_despite_errors_missing_extra_and_shuffled_lines(
    tmp_path: Path, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-fake")
    with BatchServer(delay=0.2) as server:
        url = server.base_url if style == "openai" else server.root_url
        provider_name = "openai-compat" if style == "openai" else "anthropic"
        model = ModelFactory(cache=None, prices=PRICES).get(f"{provider_name}/m@{url}?key_env=FAKE_KEY")
        ids = [batch_request(model, q, GenerateConfig()).custom_id for q in _questions(8)]
        server.faults = BatchFaults(
            error_ids={ids[1]}, drop_ids={ids[2]}, extra_lines=2, garbage_lines=1, shuffle=True
        )
        outcome, requested = asyncio.run(_run_batch(model, tmp_path, 8, max_attempts=1))
        creates = server.stats.creates
    assert requested == ids
    assert creates == [ids]
    for i, cid in enumerate(ids):
        if i in (1, 2):
            continue
        item = outcome.items[cid]
        assert item.response is not None and item.response.text == f"reply to: question {i}"
        assert item.response.finish_reason == "stop" and item.response.usage.completion_tokens > 0
    assert "fake error 400" in str(outcome.items[ids[1]].error)
    assert not outcome.items[ids[1]].retryable
    assert outcome.missing == [ids[2]]
    assert sorted(outcome.unknown) == ["stranger-0", "stranger-1"]
    assert outcome.malformed == 1 and outcome.out_of_order > 0
    assert outcome.jobs == 1 and outcome.submitted == 1


def test_results_go_through_the_cache_and_cost_half(tmp_path: Path) -> None:
    with BatchServer(delay=0.1) as server:
        cache = CallCache(tmp_path / "cache.sqlite")
        tracker = UsageTracker()
        model = ModelFactory(cache=cache, tracker=tracker, prices=PRICES).get(
            f"openai-compat/m@{server.base_url}"
        )
        outcome, ids = asyncio.run(_run_batch(model, tmp_path / "journal", 3))
        results = accept_results(model, outcome)
        completions = [results[cid] for cid in ids]
        assert all(not isinstance(c, ModelCallError) for c in completions)
        first = completions[0]
        assert not isinstance(first, ModelCallError)
        direct_price = PRICES.cost(model.spec, first.usage)
        assert direct_price is not None and first.cost_usd is not None
        assert first.cost_usd == pytest.approx(direct_price / 2) and first.cost_usd > 0
        assert first.cache_key == ids[0] and first.finish_reason == "stop"
        record = tracker.to_record()["per_model"]["openai-compat/m"]
        assert record["calls"] == 3 and record["batch_calls"] == 3

        # The same calls made directly now come from the cache: no request reaches any server.
        async def direct() -> list[str]:
            return [(await model.complete(q, GenerateConfig())).text for q in _questions(3)]

        assert asyncio.run(direct()) == [f"reply to: question {i}" for i in range(3)]
        assert tracker.cache_hits == 3
        cache.close()


def test_missing_and_failed_requests_become_errors_recorded_against_their_request(tmp_path: Path) -> None:
    with BatchServer(delay=0.1) as server:
        tracker = UsageTracker()
        model = ModelFactory(cache=None, tracker=tracker, prices=PRICES).get(
            f"openai-compat/m@{server.base_url}"
        )
        ids = [batch_request(model, q, GenerateConfig()).custom_id for q in _questions(3)]
        server.faults = BatchFaults(error_ids={ids[0]}, drop_ids={ids[1]})
        outcome, _ = asyncio.run(_run_batch(model, tmp_path, 3, max_attempts=1))
        results = accept_results(model, outcome)
    assert isinstance(results[ids[0]], ModelCallError) and "400" in str(results[ids[0]])
    assert isinstance(results[ids[1]], ModelCallError) and "no result line" in str(results[ids[1]])
    assert not isinstance(results[ids[2]], ModelCallError)
    assert tracker.errors == 2 and tracker.calls == 1


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_an_expired_job_is_resubmitted_only_for_its_unanswered_requests(
    tmp_path: Path, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-fake")
    with BatchServer(delay=0.1, faults=BatchFaults(expire_jobs=1)) as server:
        url = server.base_url if style == "openai" else server.root_url
        provider = "openai-compat" if style == "openai" else "anthropic"
        model = ModelFactory(cache=None).get(f"{provider}/m@{url}?key_env=FAKE_KEY")
        outcome, ids = asyncio.run(_run_batch(model, tmp_path, 6))
        creates = server.stats.creates
    assert creates == [ids, ids[3:]]  # the first half was answered before the job expired
    assert all(outcome.items[cid].ok for cid in ids) and not outcome.missing
    assert outcome.submitted == 2 and outcome.resubmitted == 3


def test_a_failed_job_is_resubmitted_and_transient_request_errors_retried(tmp_path: Path) -> None:
    with BatchServer(delay=0.1) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        ids = [batch_request(model, q, GenerateConfig()).custom_id for q in _questions(4)]
        server.faults = BatchFaults(fail_jobs=1, transient_ids={ids[2]})
        outcome, _ = asyncio.run(_run_batch(model, tmp_path, 4))
        creates = server.stats.creates
    assert creates == [ids, ids, [ids[2]]]  # failed whole; then the one 500 again
    assert all(outcome.items[cid].ok for cid in ids)


def test_resubmission_stops_after_max_attempts(tmp_path: Path) -> None:
    with BatchServer(delay=0.05, faults=BatchFaults(fail_jobs=10)) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        outcome, ids = asyncio.run(_run_batch(model, tmp_path, 2, max_attempts=2))
        assert len(server.stats.creates) == 2
    assert outcome.missing == ids and outcome.items == {}


def test_a_finished_journal_makes_no_calls(tmp_path: Path) -> None:
    with BatchServer(delay=0.05) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        first, _ = asyncio.run(_run_batch(model, tmp_path, 3))
        polls = server.stats.polls
        again, _ = asyncio.run(_run_batch(model, tmp_path, 3))
        assert len(server.stats.creates) == 1 and server.stats.polls == polls
    assert again.submitted == 0 and {c: i.response for c, i in again.items.items()} == {
        c: i.response for c, i in first.items.items()
    }


def test_an_interrupted_submission_is_found_by_its_tag_not_submitted_again(tmp_path: Path) -> None:
    """Killed between the provider creating the job and the journal recording its id."""
    with BatchServer(delay=0.05) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        requests = [batch_request(model, q, GenerateConfig()) for q in _questions(2)]
        journal = BatchJournal(tmp_path, "openai")
        record = journal.add([r.custom_id for r in requests])  # the intent was written ...
        provider = OpenAIBatchProvider(model.spec)

        async def created_then_killed() -> None:
            await provider.submit(requests, record.tag)  # ... the job created, the id never saved
            await provider.aclose()

        asyncio.run(created_then_killed())
        outcome, _ = asyncio.run(_run_batch(model, tmp_path, 2))
        assert len(server.stats.creates) == 1
    assert outcome.submitted == 0 and all(item.ok for item in outcome.items.values())


def test_cancel_stops_running_jobs_and_keeps_what_was_answered(tmp_path: Path) -> None:
    with BatchServer(delay=30) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        provider = batch_provider(model.spec)
        runner = BatchRunner(provider, BatchJournal(tmp_path, provider.name), poll=FAST, max_attempts=1)
        requests = [batch_request(model, q, GenerateConfig()) for q in _questions(4)]

        async def scenario() -> BatchOutcome:
            task = asyncio.create_task(runner.run(requests))
            while not any(job.status == "running" for job in runner.journal.jobs):
                await asyncio.sleep(0.02)
            await runner.cancel_all()
            try:
                return await asyncio.wait_for(task, 10)
            finally:
                await provider.aclose()

        outcome = asyncio.run(scenario())
        assert server.stats.cancels == 1
    assert len(outcome.items) == 4 and sum(item.ok for item in outcome.items.values()) == 2
    assert all(item.retryable for item in outcome.items.values() if not item.ok)


def test_journal_of_another_provider_or_garbled_is_refused(tmp_path: Path) -> None:
    BatchJournal(tmp_path, "openai").add(["x"])
    with pytest.raises(ConfigError, match="provider 'openai'"):
        BatchJournal(tmp_path, "anthropic")
    (tmp_path / BatchJournal.FILE).write_text("{nope")
    with pytest.raises(ConfigError, match="unreadable batch journal"):
        BatchJournal(tmp_path, "openai")


@pytest.mark.slow
def test_a_process_killed_while_polling_resumes_and_submits_nothing_twice(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    with BatchServer(delay=3.0) as server:
        spec = f"openai-compat/m@{server.base_url}"
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}

        def client(out: str) -> subprocess.Popen[bytes]:
            args = [
                sys.executable,
                "-m",
                "tests.support.batch_client",
                spec,
                str(journal),
                "20",
                str(tmp_path / out),
            ]
            return subprocess.Popen(args, cwd=ROOT, env=env)

        first = client("first.json")
        deadline = time.monotonic() + 30
        while not (server.stats.creates and server.stats.polls >= 2):  # submitted, and polling
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert first.returncode == -signal.SIGKILL
        assert not (tmp_path / "first.json").exists()
        saved = json.loads((journal / BatchJournal.FILE).read_text())
        assert [job["status"] for job in saved["jobs"]] == ["running"]

        second = client("second.json")
        assert second.wait(timeout=60) == 0
        result = json.loads((tmp_path / "second.json").read_text())
        creates = server.stats.creates
    assert len(creates) == 1 and len(creates[0]) == 20  # nothing submitted twice
    assert result["submitted"] == 0 and result["jobs"] == 1 and result["missing"] == []
    assert sorted(result["texts"].values()) == sorted(f"reply to: question {i}" for i in range(20))


def test_a_create_whose_answer_was_lost_is_found_not_submitted_again(tmp_path: Path) -> None:
    with BatchServer(delay=0.05, faults=BatchFaults(lost_creates=1)) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        outcome, ids = asyncio.run(_run_batch(model, tmp_path, 3))
        assert server.stats.creates == [ids]
    assert outcome.submitted == 1 and all(outcome.items[cid].ok for cid in ids)


def test_transient_polling_failures_are_ridden_out(tmp_path: Path) -> None:
    with BatchServer(delay=0.05, faults=BatchFaults(poll_errors=3)) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        outcome, ids = asyncio.run(_run_batch(model, tmp_path, 2))
        assert server.stats.polls >= 4
    assert all(outcome.items[cid].ok for cid in ids)


def test_waiting_gives_up_after_max_wait_and_a_later_run_resumes(tmp_path: Path) -> None:
    with BatchServer(delay=1.0) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        requests = [batch_request(model, q, GenerateConfig()) for q in _questions(2)]

        async def attempt(max_wait: float | None) -> BatchOutcome:
            provider = batch_provider(model.spec)
            policy = PollPolicy(initial=0.05, maximum=0.1, max_wait=max_wait)
            try:
                return await BatchRunner(provider, BatchJournal(tmp_path, provider.name), poll=policy).run(
                    requests
                )
            finally:
                await provider.aclose()

        with pytest.raises(BatchPending, match="run again to resume"):
            asyncio.run(attempt(0.2))
        outcome = asyncio.run(attempt(None))
        assert len(server.stats.creates) == 1
    assert outcome.submitted == 0 and all(item.ok for item in outcome.items.values())


def test_requests_are_split_at_the_providers_job_limits(tmp_path: Path) -> None:
    with BatchServer(delay=0.05) as server:
        model = ModelFactory(cache=None).get(f"openai-compat/m@{server.base_url}")
        provider = OpenAIBatchProvider(model.spec)
        provider.max_requests = 3
        runner = BatchRunner(provider, BatchJournal(tmp_path, provider.name), poll=FAST)
        requests = [batch_request(model, q, GenerateConfig()) for q in _questions(7)]

        async def scenario() -> BatchOutcome:
            try:
                return await runner.run(requests)
            finally:
                await provider.aclose()

        outcome = asyncio.run(scenario())
        assert [len(c) for c in server.stats.creates] == [3, 3, 1]
    assert outcome.jobs == 3 and len(outcome.items) == 7
    weight = len(json.dumps(requests[0].body)) + len(requests[0].custom_id) + 64  # as `_chunks` counts
    provider.max_requests, provider.max_bytes = 100, 2 * weight
    assert [len(c) for c in runner._chunks(requests)] == [2, 2, 2, 1]


def test_model_cached_reads_an_accepted_batch_answer(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "c.sqlite")
    model = ModelFactory(cache=cache, prices=PRICES).get("openai-compat/m@http://127.0.0.1:9/v1")
    messages = [Message(role="user", content="hello")]
    key = model.key_for(messages, GenerateConfig())
    assert model.cached(key) is None
    model.accept(key, BackendResponse(text="hi", usage=Usage(prompt_tokens=1)), batch=True)
    hit = model.cached(key)
    assert hit is not None and hit.text == "hi" and hit.cached and hit.cost_usd == 0.0
    cache.close()

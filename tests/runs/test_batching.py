"""`--batch` in the shared lifecycle (runs/batching.py), for every registered benchmark: a batch run
through the fake batch endpoint scores exactly as the direct run on the same replies; rejected and
failed batch replies are errors as direct ones are; models without a batch API run directly in
the same rounds; a run killed while polling resumes without submitting anything twice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from personalign import api, registry
from personalign.cli import app
from personalign.llm.backends.scripted import default_responder
from personalign.llm.types import BackendResponse, GenerateConfig, Usage
from personalign.runs.lifecycle import RunResult
from personalign.runs.store import RunDir
from personalign.types import Message
from tests.support.batch_server import BatchFaults, BatchServer
from tests.support.stub_server import StubServer

ROOT = Path(__file__).resolve().parents[2]
NOT_METRICS = ("usage", "finished", "batch")


def _metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without what may differ between equal runs (usage, timestamps, the batch section)."""
    return {k: v for k, v in summary.items() if k not in NOT_METRICS}


def _steps(run_dir: Path) -> dict[str, Any]:
    """Every record's results and steps as scored: status, replies, parsed values, errors."""
    return {
        iid: (
            record.status,
            {k: v.model_dump() for k, v in record.results.items()},
            {
                name: (step.status, step.raw, step.parsed, step.error, step.flags, step.finish_reasons)
                for name, step in record.steps.items()
            },
        )
        for iid, record in RunDir(run_dir).records().items()
    }


def _per_model(result: RunResult) -> dict[str, Any]:
    return result.summary["usage"]["per_model"]  # type: ignore[no-any-return]


def _prices(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"stub": {"input": 2.5, "output": 10.0}}), encoding="utf-8")
    return path


def _run(name: str, spec: str, tmp_path: Path, tag: str, *, judge: str | None = None, **kw: Any) -> RunResult:
    return api.run(
        name,
        model=spec,
        judge=judge or spec,
        limit=3,
        run_dir=tmp_path / tag,
        cache=tmp_path / f"{tag}.sqlite",
        prices=_prices(tmp_path),
        **kw,
    )


@pytest.mark.parametrize("name", registry.names())
def test_a_batch_run_scores_as_the_direct_run_on_the_same_replies(name: str, tmp_path: Path) -> None:
    with StubServer() as stub, BatchServer(delay=0, responder=default_responder) as fake:
        direct = _run(name, f"openai-compat/stub@{stub.base_url}", tmp_path, "direct")
        batch = _run(name, f"openai-compat/stub@{fake.base_url}", tmp_path, "batch", batch=True)
        creates = fake.stats.creates
    assert batch.summary["status"] == direct.summary["status"] == "complete"
    assert _metrics(batch.summary) == _metrics(direct.summary)
    assert _steps(tmp_path / "batch") == _steps(tmp_path / "direct")
    section = batch.summary["batch"]
    assert section["batch"] is True and section["batched_models"] == ["openai-compat/stub"]
    assert section["jobs"] == len(creates) >= 1 and section["rounds"] == len(creates) + 1
    assert section["wait_s"] >= 0
    # every call went by batch, once, and cost half of what the same answers cost direct
    assert (
        sum(map(len, creates))
        == direct.summary["usage"]["calls"]
        == _per_model(batch)["openai-compat/stub"]["batch_calls"]
    )
    assert batch.summary["usage"]["cost_usd"] == pytest.approx(
        direct.summary["usage"]["cost_usd"] / 2, abs=2e-6
    )
    assert RunDir(tmp_path / "batch").read_manifest()["batch"] is True
    # a finished batch run returns at once: nothing submitted again
    with BatchServer(delay=0, responder=default_responder) as again:
        _run(name, f"openai-compat/stub@{fake.base_url}", tmp_path, "batch", batch=True)
        assert again.stats.creates == [] and again.stats.uploads == 0


def _damaging(messages: Sequence[Message], config: GenerateConfig) -> str | BackendResponse:
    """The default replies, with some cut off at the token limit and some garbled (by the prompt's hash,
    so the direct and the batch run damage the same calls)."""
    reply = default_responder(messages, config)
    text = reply if isinstance(reply, str) else reply.text
    digest = int(hashlib.sha256(messages[-1].content.encode()).hexdigest(), 16)
    if digest % 3 == 0:
        return BackendResponse(text=text[: len(text) // 2], usage=Usage(), finish_reason="length")
    if digest % 5 == 0:
        return "~~ garbled ~~"
    return text


def test_truncated_and_unparseable_batch_replies_are_errors_as_direct_ones(tmp_path: Path) -> None:
    with StubServer(responder=_damaging) as stub, BatchServer(delay=0, responder=_damaging) as fake:
        direct = _run("cupid", f"openai-compat/stub@{stub.base_url}", tmp_path, "direct")
        batch = _run("cupid", f"openai-compat/stub@{fake.base_url}", tmp_path, "batch", batch=True)
    assert direct.summary["status"] == "complete_with_errors"
    assert _metrics(batch.summary) == _metrics(direct.summary)
    assert _steps(tmp_path / "batch") == _steps(tmp_path / "direct")


def test_batch_requests_that_never_get_an_answer_are_errors_of_their_instances(tmp_path: Path) -> None:
    # every job fails, also when resubmitted: nothing is scored, every instance records why
    with BatchServer(delay=0, responder=default_responder, faults=BatchFaults(fail_jobs=100)) as fake:
        batch = _run("cupid", f"openai-compat/stub@{fake.base_url}", tmp_path, "batch", batch=True)
    records = RunDir(tmp_path / "batch").records()
    assert batch.summary["status"] == "complete_with_errors" and len(records) == 3
    for record in records.values():
        assert record.status != "ok"
        errors = [s.error for s in record.steps.values() if s.status == "error"]
        assert errors and all("batch" in (e or "") for e in errors)
    assert batch.summary["usage"]["errors"] == 3


def test_models_without_a_batch_api_run_directly_in_the_same_rounds(tmp_path: Path) -> None:
    with StubServer() as stub, BatchServer(delay=0, responder=default_responder) as fake:
        direct = _run("cupid", f"openai-compat/stub@{stub.base_url}", tmp_path, "direct", judge="scripted/j")
        batch = _run(
            "cupid", f"openai-compat/stub@{fake.base_url}", tmp_path, "batch", judge="scripted/j", batch=True
        )
    assert _metrics(batch.summary) == _metrics(direct.summary)
    assert batch.summary["batch"]["direct_models"] == ["scripted/j"]
    assert batch.summary["batch"]["batched_models"] == ["openai-compat/stub"]
    by_model = _per_model(batch)
    assert by_model["scripted/j"]["calls"] > 0 and "batch_calls" not in by_model["scripted/j"]


def test_cli_batch_flag_reaches_the_lifecycle(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            *["run", "cupid", "-m", "scripted/s", "-j", "scripted/j", "--limit", "2"],
            *["--run-dir", str(run_dir), "--cache", str(tmp_path / "c.sqlite"), "--no-progress", "--batch"],
        ],
    )
    assert result.exit_code == 0, result.output
    summary = RunDir(run_dir).read_summary()
    assert summary is not None and summary["status"] == "complete"
    assert summary["batch"]["direct_models"] == ["scripted/s", "scripted/j"]
    assert summary["batch"]["rounds"] == 1 and summary["batch"]["jobs"] == 0


def _client(spec: str, run_dir: Path, cache: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.batch_run_client",
            "cupid",
            spec,
            str(run_dir),
            str(cache),
            "3",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_a_run_killed_while_polling_resumes_and_submits_nothing_twice(tmp_path: Path) -> None:
    run_dir, cache = tmp_path / "batch", tmp_path / "batch.sqlite"
    with StubServer() as stub:
        direct = _run("cupid", f"openai-compat/stub@{stub.base_url}", tmp_path, "direct")
    with BatchServer(delay=1.0, responder=default_responder) as fake:
        spec = f"openai-compat/stub@{fake.base_url}"
        first = _client(spec, run_dir, cache)
        deadline = time.monotonic() + 60
        # killed while the second round's job is being polled (the first round's answers are in)
        while len(fake.stats.creates) < 2 or fake.stats.polls < 3:
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            assert time.monotonic() < deadline, "the batch client never reached its second job"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
        assert RunDir(run_dir).read_summary() is None
        creates_before = len(fake.stats.creates)

        second = _client(spec, run_dir, cache)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err.decode()
        submitted = [cid for job in fake.stats.creates for cid in job]
        assert len(submitted) == len(set(submitted)), "a request was submitted twice"
        assert len(fake.stats.creates) > creates_before  # the resumed run went on to the next round
        assert len(submitted) == direct.summary["usage"]["calls"]  # nothing lost, nothing extra

        third = _client(spec, run_dir, cache)  # a finished run: no calls at all
        _, err = third.communicate(timeout=120)
        assert third.returncode == 0, err.decode()
        assert [cid for job in fake.stats.creates for cid in job] == submitted
    summary = RunDir(run_dir).read_summary()
    assert summary is not None and summary["status"] == "complete"
    assert _metrics(summary) == _metrics(RunDir(tmp_path / "direct").read_summary() or {})
    assert _steps(run_dir) == _steps(tmp_path / "direct")


def test_an_openai_compatible_server_without_the_batches_api_is_called_directly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with StubServer() as stub:
        spec = f"openai-compat/stub@{stub.base_url}"
        direct = _run("cupid", spec, tmp_path, "direct")
        batch = _run("cupid", spec, tmp_path, "batch", batch=True)
    assert _metrics(batch.summary) == _metrics(direct.summary)
    assert batch.summary["batch"]["direct_models"] == ["openai-compat/stub"]
    assert batch.summary["batch"]["batched_models"] == [] and batch.summary["batch"]["jobs"] == 0
    assert "has no batch API" in caplog.text
    assert not (tmp_path / "batch" / "batch").exists() or not any((tmp_path / "batch" / "batch").iterdir())


def test_anthropic_batches_score_as_direct_calls_and_keep_the_key_out_of_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-ant-SECRET-0123456789"
    monkeypatch.setenv("FAKE_BATCH_KEY", secret)
    with StubServer() as stub, BatchServer(delay=0, responder=default_responder) as fake:
        direct = _run("cupid", f"openai-compat/stub@{stub.base_url}", tmp_path, "direct")
        spec = f"anthropic/stub@{fake.root_url}?key_env=FAKE_BATCH_KEY"
        batch = _run("cupid", spec, tmp_path, "batch", batch=True)
        creates = fake.stats.creates
    assert batch.summary["status"] == "complete" and len(creates) >= 2
    assert _metrics(batch.summary)["inference"] == _metrics(direct.summary)["inference"]
    assert _per_model(batch)["anthropic/stub"]["batch_calls"] == sum(map(len, creates))
    written = [p for p in (tmp_path / "batch").rglob("*") if p.is_file()]
    assert any(p.name == "batch_journal.json" for p in written)
    assert all(secret not in p.read_text(encoding="utf-8", errors="replace") for p in written)


def test_an_expired_job_is_resubmitted_only_for_what_it_left_unanswered(tmp_path: Path) -> None:
    with (
        StubServer() as stub,
        BatchServer(delay=0, responder=default_responder, faults=BatchFaults(expire_jobs=1)) as fake,
    ):
        direct = _run("cupid", f"openai-compat/stub@{stub.base_url}", tmp_path, "direct")
        batch = _run("cupid", f"openai-compat/stub@{fake.base_url}", tmp_path, "batch", batch=True)
        creates = fake.stats.creates
    assert _metrics(batch.summary) == _metrics(direct.summary)
    assert _steps(tmp_path / "batch") == _steps(tmp_path / "direct")
    first, again = creates[0], creates[1]
    assert again == first[len(first) // 2 :]  # the expired job's unanswered half, nothing else
    submitted = [cid for job in creates for cid in job]
    assert len(submitted) == len(set(submitted)) + len(again)

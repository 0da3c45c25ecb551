"""The `serve keys` commands, the backend's stream parser, and the gateway as a benchmark subject."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from personalign.cli import app
from personalign.errors import ModelCallError
from personalign.llm import parse_model_spec
from personalign.llm.backends.openai_compat import OpenAICompatBackend
from personalign.runs.store import RunDir
from personalign.serve import KeyRing
from tests.serve.conftest import Gateway


def test_keys_add_list_revoke(tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "keys.jsonl"
    result = runner.invoke(
        app, ["serve", "keys", "add", "--tenant", "acme", "--keys", str(path), "--rate", "5"]
    )
    assert result.exit_code == 0, result.output
    key = result.stdout.strip().splitlines()[-1]
    assert key.startswith("pk_") and key not in path.read_text()
    record = KeyRing.load(path).authenticate(key)
    assert record is not None and record.tenant == "acme" and record.rate == 5
    listed = runner.invoke(app, ["serve", "keys", "list", "--keys", str(path)])
    row = json.loads(listed.stdout.strip())
    assert row["key_id"] == record.key_id and "sha256" not in row and "salt" not in row
    assert runner.invoke(app, ["serve", "keys", "revoke", record.key_id, "--keys", str(path)]).exit_code == 0
    assert KeyRing.load(path).authenticate(key) is None
    bad = runner.invoke(app, ["serve", "keys", "add", "--tenant", "a/b", "--keys", str(path)])
    assert bad.exit_code == 2 and "tenant" in bad.output
    refused = runner.invoke(
        app, ["serve", "--upstream", "scripted/x", "--keys", str(tmp_path / "none.jsonl")]
    )
    assert refused.exit_code == 2 and "no API keys" in refused.output


def test_stream_event_parser() -> None:
    backend = OpenAICompatBackend(parse_model_spec("openai-compat/m@http://127.0.0.1:9/v1"))
    chunk = backend.parse_stream_event('{"choices": [{"delta": {"content": "Hi"}, "finish_reason": null}]}')
    assert chunk is not None and chunk.text == "Hi" and chunk.finish_reason is None
    last = backend.parse_stream_event('{"choices": [{"delta": {}, "finish_reason": "length"}]}')
    assert last is not None and last.finish_reason == "length" and last.raw_finish_reason == "length"
    usage = backend.parse_stream_event(
        '{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}'
    )
    assert usage is not None and usage.usage is not None and usage.usage.completion_tokens == 4
    assert backend.parse_stream_event('{"choices": [{"delta": {"role": "assistant"}}]}') is None
    with pytest.raises(ModelCallError, match="malformed stream event"):
        backend.parse_stream_event("{not json")
    with pytest.raises(ModelCallError, match="error in stream"):
        backend.parse_stream_event('{"error": {"message": "overloaded"}}')


def test_benchpres_runs_against_the_gateway(
    gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_KEY", gateway.keys["bench"])
    spec = f"openai-compat/stub@{gateway.server.base_url}?key_env=GATEWAY_KEY"
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["run", "benchpres", "--model", spec, "--judge", "scripted/j", "--limit", "2", "--samples", "1",
         "--no-cache", "--no-progress", "--run-dir", str(run_dir)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = RunDir(run_dir).records()
    assert len(records) == 2
    assert all(r.steps["generate"].status == "ok" for r in records.values())
    # the gateway saw the key's default user and recorded every exchange it forwarded
    exported: Any = gateway.client.get("/v1/memory/export", headers=gateway.headers("bench")).json()
    assert gateway.stub is not None and gateway.stub.stats.requests >= 2
    assert exported["user"] == "bench-user" and len(exported["sessions"]) == gateway.stub.stats.requests
    assert gateway.keys["bench"] not in json.dumps(json.loads((run_dir / "manifest.json").read_text()))

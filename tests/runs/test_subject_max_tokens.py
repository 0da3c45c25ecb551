"""The subject's max_tokens default: lower for the bundled local model, 1024 for any other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.benchmarks.cupid.steps import (
    EMBEDDED_SUBJECT_MAX_TOKENS,
    SUBJECT_MAX_TOKENS,
    CupidConfig,
    default_subject_max_tokens,
)
from personalign.cli import app
from personalign.llm.spec import EMBEDDED_DEFAULT


def test_default_is_lower_only_for_the_embedded_model() -> None:
    assert default_subject_max_tokens(EMBEDDED_DEFAULT) == EMBEDDED_SUBJECT_MAX_TOKENS == 256
    assert default_subject_max_tokens("openai-compat/qwen@http://127.0.0.1:8000/v1") == SUBJECT_MAX_TOKENS
    spec = "scripted/x"
    assert CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=spec).subject_max_tokens == 1024


@pytest.mark.parametrize(("options", "expected"), [([], 1024), (["--max-tokens", "77"], 77)])
def test_cli_records_the_subject_max_tokens(tmp_path: Path, options: list[str], expected: int) -> None:
    run_dir = tmp_path / "run"
    args = ["run", "cupid", "--model", "scripted/x", "--judge", "scripted/x", "--limit", "1"]
    args += ["--run-dir", str(run_dir), "--cache", str(tmp_path / "c.sqlite"), "--no-progress", *options]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["subject_max_tokens"] == expected

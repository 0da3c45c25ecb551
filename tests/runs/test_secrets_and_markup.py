"""No credential from a model spec reaches a run directory, a report or stderr; messages print verbatim."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from personalign import cli_common
from personalign.cli import app
from personalign.errors import ConfigError
from personalign.llm.spec import parse_model_spec
from personalign.redact import redact_text
from tests.support.stub_server import StubServer

runner = CliRunner()
SECRET = "sk-SEKRIT-4242"


def _files_containing(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_redact_text_masks_userinfo_and_secret_query_values() -> None:
    assert redact_text(f"http://user:{SECRET}@host:8/v1") == "http://***@host:8/v1"
    assert redact_text(f"https://{SECRET}@host/v1") == "https://***@host/v1"
    shown = redact_text(f"x@http://h/v1?api_key={SECRET}&timeout=3&Token={SECRET}&password={SECRET}")
    assert SECRET not in shown and "timeout=3" in shown and "api_key=***" in shown
    assert (
        redact_text("local/smollm2?key_env=MY_KEY&concurrency=2")
        == "local/smollm2?key_env=MY_KEY&concurrency=2"
    )
    assert redact_text("mail me at a@b.com, a=b") == "mail me at a@b.com, a=b"
    # redacting JSON text keeps it valid JSON, whatever quotes and backslashes the values hold
    text = json.dumps({"u": 'http://a:b"c@h/?token=x\\"y&k=1', "v": "https://u\\:p@h"})
    assert "token=***" in redact_text(text)
    json.loads(redact_text(text))


def test_spec_records_and_errors_are_redacted() -> None:
    spec = parse_model_spec(f"openai-compat/m@http://user:{SECRET}@host:8000/v1")
    assert spec.base_url == f"http://user:{SECRET}@host:8000/v1"  # the backend still gets it
    assert SECRET not in str(spec) and SECRET not in repr(spec.to_record())
    with pytest.raises(ConfigError) as refused:
        parse_model_spec(f"openai-compat/m@http://host/v1?api_key={SECRET}")
    assert SECRET not in str(refused.value) and "api_key" in str(refused.value)


def test_a_key_in_the_base_url_reaches_no_file_and_no_output(tmp_path: Path) -> None:
    with StubServer() as srv:
        spec = srv.base_url.replace("http://", f"http://user:{SECRET}@")
        spec = f"openai-compat/stub@{spec}"
        result = runner.invoke(
            app,
            ["run", "cupid", "-m", spec, "-j", spec, "--limit", "2", "--task", "both", "--progress",
             "--run-dir", str(tmp_path / "run"), "--cache", str(tmp_path / "c.sqlite")],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        report = runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "report")])
        assert report.exit_code == 0, report.output
    assert (tmp_path / "run" / "manifest.json").exists()
    assert "http://***@127.0.0.1" in (tmp_path / "run" / "manifest.json").read_text()
    assert _files_containing(tmp_path / "run", SECRET) == []
    assert _files_containing(tmp_path / "report", SECRET) == []
    assert SECRET not in result.output and SECRET not in report.output


def test_a_refused_secret_query_option_is_not_echoed(tmp_path: Path) -> None:
    spec = f"openai-compat/stub@http://127.0.0.1:9/v1?api_key={SECRET}"
    result = runner.invoke(
        app, ["run", "cupid", "-m", spec, "-j", spec, "--run-dir", str(tmp_path / "run"), "--no-progress"]
    )
    assert result.exit_code == 2
    assert "api_key" in result.output and SECRET not in result.output
    assert not (tmp_path / "run").exists()


def test_error_text_with_brackets_prints_verbatim(monkeypatch: pytest.MonkeyPatch) -> None:
    buffer = io.StringIO()
    monkeypatch.setattr(cli_common, "console", Console(file=buffer, width=300, color_system=None))
    message = 'needs `pip install personalign[hf]`; row {"ids": [1, 2], "tag": "[bold]x[/bold]"}'
    with pytest.raises(typer.Exit) as exited:
        cli_common.fail(ConfigError(message))
    assert exited.value.exit_code == 2
    assert buffer.getvalue().strip() == f"error: {message}"


def test_the_hub_extra_hint_survives_the_cli(tmp_path: Path) -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("the hf extra is installed: the hint is not shown")
    result = runner.invoke(
        app,
        [
            "run",
            "cupid",
            "--data",
            "hf",
            "--protocol",
            "personalign",
            "--no-progress",
            "--run-dir",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 2
    assert "pip install personalign[hf]" in " ".join(result.output.split())

"""`personalign train`: the paper's defaults, and bad options refused before any model is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from personalign.cli import app
from personalign.errors import ConfigError
from personalign.train.settings import LoraSettings, TrainSettings


def test_paper_defaults() -> None:
    lora = LoraSettings()
    assert (lora.r, lora.alpha, lora.dropout, lora.target_modules) == (256, 512, 0.05, "all-linear")
    assert TrainSettings(kind="sft").lr == 1e-4
    dpo = TrainSettings(kind="dpo")
    assert (dpo.lr, dpo.beta, dpo.loss_type) == (1e-6, 0.1, "sigmoid")
    assert TrainSettings(kind="dpo", learning_rate=3e-6).lr == 3e-6
    assert "beta" not in TrainSettings(kind="sft").to_record()


@pytest.mark.parametrize(
    "kwargs",
    [{"batch_size": 0}, {"max_length": 8}, {"loss_type": "nope"}, {"max_steps": 0}, {"epochs": 0.0}],
)
def test_bad_settings_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        TrainSettings(kind="sft", **kwargs)  # type: ignore[arg-type]


def test_train_help_lists_the_commands() -> None:
    out = CliRunner().invoke(app, ["train", "--help"])
    assert out.exit_code == 0
    for name in ("sft", "dpo", "sft-dpo", "matcher", "judge"):
        assert name in out.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sft", "--dpo-lr", "1e-6"], "only apply to `train sft-dpo`"),
        (["sft", "--lora-r", "0"], "LoRA needs r >= 1"),
        (["dpo", "--loss-type", "nope"], "--loss-type must be one of"),
        (["sft", "--instruction-role", "judge"], "--instruction-role must be"),
        (["matcher", "--run", "/nonexistent/run"], "not a run directory"),
        (["judge", "--run", "/nonexistent/run"], "not a run directory"),
    ],
)
def test_bad_options_exit_2_before_loading_a_model(args: list[str], message: str, tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["train", *args, "--out", str(tmp_path / "o")])
    assert out.exit_code == 2, out.output
    assert message in " ".join(out.output.split())
    assert not (tmp_path / "o" / "adapter").exists()


def test_a_resumed_log_drops_the_steps_after_the_checkpoint(tmp_path: Path) -> None:
    import json

    from personalign.train.trainer import _losses, _trim_metrics

    log = tmp_path / "metrics.jsonl"
    # a run killed after logging step 6, its last checkpoint at step 4
    log.write_text("".join(json.dumps({"step": s, "loss": float(10 - s)}) + "\n" for s in range(1, 7)))
    _trim_metrics(log, 4)
    assert _losses(log) == [9.0, 8.0, 7.0, 6.0]
    _trim_metrics(log, 0)  # a fresh (not resumed) run starts a new log
    assert not log.exists()


def test_the_report_shows_the_loss_trend_not_only_two_batches(capsys: pytest.CaptureFixture[str]) -> None:
    from personalign.cli_train import _report
    from personalign.train.trainer import StageResult

    # the last batch happens to be a hard one: first -> last step alone reads as a rising loss
    losses = [3.0, 3.2, 2.8, 2.0, 1.8, 3.3]
    _report("sft", StageResult(Path("o"), Path("o/adapter"), losses, 1.0, 10))
    err = " ".join(capsys.readouterr().err.split())
    assert "loss 3.0000 -> 3.3000" in err
    assert "mean of the first / last 2 steps 3.1000 -> 2.5500" in err

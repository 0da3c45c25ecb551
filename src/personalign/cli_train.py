"""`personalign train sft|dpo|sft-dpo|matcher|judge`: LoRA fine-tuning on a benchmark's train split,
and distilling a finished run's matcher or judge (TRL + PEFT)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from personalign.cli_common import console, new_app
from personalign.cli_common import fail as _fail
from personalign.errors import PersonalignError

BaseOpt = Annotated[
    str,
    typer.Option(
        "--base", help="Base model: smollm2 (bundled GGUF), a .gguf file, a checkpoint dir or hub id."
    ),
]
DataOpt = Annotated[str, typer.Option("--data", help="HiCUPID data: fixture, hf[:repo] or a directory.")]
SplitOpt = Annotated[list[str], typer.Option("--split", help="Split(s) to train on (repeatable).")]
ContextOpt = Annotated[
    str, typer.Option("--context", help="History the model sees, as in `run hicupid` (full, gold, bm25-...).")
]
RoleOpt = Annotated[str, typer.Option("--instruction-role", help="system or user, as in `run hicupid`.")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="Output directory (adapter/, manifest.json, ...).")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Train on the first N questions only.")]
LrOpt = Annotated[
    float | None, typer.Option("--lr", help="Learning rate (default: the paper's, 1e-4 SFT, 1e-6 DPO).")
]
EpochsOpt = Annotated[float, typer.Option("--epochs", help="Epochs (ignored when --max-steps is set).")]
StepsOpt = Annotated[int, typer.Option("--max-steps", help="Optimizer steps; -1 = use --epochs.")]
BatchOpt = Annotated[int, typer.Option("--batch-size", help="Per-device batch size.")]
AccumOpt = Annotated[int, typer.Option("--grad-accum", help="Gradient accumulation steps.")]
MaxLenOpt = Annotated[
    int, typer.Option("--max-length", help="Token budget; longer histories lose their oldest rounds.")
]
RankOpt = Annotated[int, typer.Option("--lora-r", help="LoRA rank (paper: 256).")]
AlphaOpt = Annotated[int, typer.Option("--lora-alpha", help="LoRA alpha (paper: 512).")]
DropOpt = Annotated[float, typer.Option("--lora-dropout", help="LoRA dropout (paper: 0.05).")]
TargetOpt = Annotated[str, typer.Option("--target-modules", help="LoRA target modules (paper: all-linear).")]
TopLayersOpt = Annotated[
    int | None,
    typer.Option("--lora-top-layers", help="Adapt only the top N layers (default all; CPU smoke)."),
]
BetaOpt = Annotated[float, typer.Option("--beta", help="DPO beta (paper: 0.1).")]
LossOpt = Annotated[str, typer.Option("--loss-type", help="DPO loss (paper: sigmoid).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Training seed.")]
SaveOpt = Annotated[int, typer.Option("--save-steps", help="Checkpoint every N steps.")]
DpoLrOpt = Annotated[
    float | None, typer.Option("--dpo-lr", help="sft-dpo only: the DPO stage's learning rate.")
]
DpoStepsOpt = Annotated[
    int | None, typer.Option("--dpo-max-steps", help="sft-dpo only: the DPO stage's steps.")
]
CheckpointingOpt = Annotated[
    bool,
    typer.Option(
        "--gradient-checkpointing/--no-gradient-checkpointing",
        help="Recompute activations to save memory (slower; off helps small CPU runs).",
    ),
]
QloraOpt = Annotated[bool, typer.Option("--qlora", help="4-bit NF4 base (needs CUDA and bitsandbytes).")]
RunOpt = Annotated[
    Path,
    typer.Option(
        "--run", help="A finished run directory, the teacher (CUPID for matcher, HiCUPID for judge)."
    ),
]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue from the last checkpoint in --out.")]


def _settings(kind: str, **values: Any) -> Any:
    from personalign.train.settings import LoraSettings, TrainSettings

    lora = LoraSettings(
        r=values.pop("lora_r"),
        alpha=values.pop("lora_alpha"),
        dropout=values.pop("lora_dropout"),
        target_modules=values.pop("target_modules"),
        top_layers=values.pop("lora_top_layers"),
    )
    return TrainSettings(kind=kind, lora=lora, **values)  # type: ignore[arg-type]


def _data(data: str, split: list[str], role: str, limit: int | None) -> Any:
    from personalign.errors import ConfigError
    from personalign.train.recipes import DataSettings

    if role not in ("system", "user"):
        raise ConfigError("--instruction-role must be system or user")
    return DataSettings(source=data, splits=tuple(split), instruction_role=role, limit=limit)  # type: ignore[arg-type]


def _report(label: str, result: Any) -> None:
    losses = result.losses
    trend = "no loss logged"
    if losses:  # one step's loss is one batch's: the means of the first / last third show the trend
        k = max(1, len(losses) // 3)
        head, tail = sum(losses[:k]) / k, sum(losses[-k:]) / k
        trend = (
            f"loss {losses[0]:.4f} -> {losses[-1]:.4f} "
            f"(mean of the first / last {k} steps {head:.4f} -> {tail:.4f})"
        )
    console.print(f"[bold]{label}[/]: {trend}; {result.tokens_per_s:.1f} tokens/s; adapter {result.adapter}")


def register(app: typer.Typer) -> None:
    """Add the `train` command group to the CLI."""
    train_app = new_app(no_args_is_help=True, help="Fine-tune a model on a benchmark's train split (LoRA).")
    app.add_typer(train_app, name="train")

    def make(kind: str) -> Any:
        def command(
            out: OutOpt,
            base: BaseOpt = "smollm2",
            data: DataOpt = "fixture",
            split: SplitOpt = ["train"],  # noqa: B006 (typer reads the default)
            context: ContextOpt = "full",
            instruction_role: RoleOpt = "system",
            limit: LimitOpt = None,
            lr: LrOpt = None,
            epochs: EpochsOpt = 1.0,
            max_steps: StepsOpt = -1,
            batch_size: BatchOpt = 1,
            grad_accum: AccumOpt = 1,
            max_length: MaxLenOpt = 4096,
            lora_r: RankOpt = 256,
            lora_alpha: AlphaOpt = 512,
            lora_dropout: DropOpt = 0.05,
            target_modules: TargetOpt = "all-linear",
            lora_top_layers: TopLayersOpt = None,
            beta: BetaOpt = 0.1,
            loss_type: LossOpt = "sigmoid",
            seed: SeedOpt = 0,
            save_steps: SaveOpt = 50,
            resume: ResumeOpt = False,
            gradient_checkpointing: CheckpointingOpt = True,
            qlora: QloraOpt = False,
            dpo_lr: DpoLrOpt = None,
            dpo_max_steps: DpoStepsOpt = None,
        ) -> None:
            try:
                from personalign.errors import ConfigError
                from personalign.train.recipes import train, train_sft_dpo

                if kind != "sft-dpo" and (dpo_lr is not None or dpo_max_steps is not None):
                    raise ConfigError("--dpo-lr and --dpo-max-steps only apply to `train sft-dpo`")

                common = {
                    "epochs": epochs,
                    "max_steps": max_steps,
                    "batch_size": batch_size,
                    "grad_accum": grad_accum,
                    "max_length": max_length,
                    "lora_r": lora_r,
                    "lora_alpha": lora_alpha,
                    "lora_dropout": lora_dropout,
                    "target_modules": target_modules,
                    "lora_top_layers": lora_top_layers,
                    "beta": beta,
                    "loss_type": loss_type,
                    "seed": seed,
                    "save_steps": save_steps,
                    "context": context,
                    "gradient_checkpointing": gradient_checkpointing,
                    "qlora": qlora,
                }
                data_settings = _data(data, split, instruction_role, limit)
                if kind == "sft-dpo":
                    sft_s = _settings("sft", learning_rate=lr, **dict(common))
                    dpo_common = dict(common)
                    if dpo_max_steps is not None:
                        dpo_common["max_steps"] = dpo_max_steps
                    dpo_s = _settings("dpo", learning_rate=dpo_lr, **dpo_common)
                    first, second = train_sft_dpo(base, data_settings, sft_s, dpo_s, out, resume)
                    _report("sft", first)
                    _report("dpo", second)
                else:
                    result = train(
                        base, data_settings, _settings(kind, learning_rate=lr, **common), out, resume
                    )
                    _report(kind, result)
            except PersonalignError as exc:
                _fail(exc)

        return command

    train_app.command("sft", help="LoRA SFT: learn the personalized answer (paper: lr 1e-4).")(make("sft"))
    train_app.command("dpo", help="LoRA DPO: personalized over general answer (paper: lr 1e-6, beta 0.1).")(
        make("dpo")
    )
    train_app.command(
        "sft-dpo", help="SFT, merge the adapter, then DPO on the merged model (out/sft, out/dpo)."
    )(make("sft-dpo"))

    def make_distil(kind: str) -> Any:
        def command(
            run: RunOpt,
            out: OutOpt,
            base: BaseOpt = "smollm2",
            data: Annotated[
                str | None, typer.Option("--data", help="The run's data (default: its manifest's).")
            ] = None,
            held_out_fraction: Annotated[
                float,
                typer.Option("--held-out", help="Share of instances held out for the agreement report."),
            ] = 0.25,
            lr: Annotated[
                float, typer.Option("--lr", help="Learning rate (CUPID's PrefMatcher: 3e-4).")
            ] = 3e-4,
            epochs: EpochsOpt = 1.0,
            max_steps: StepsOpt = -1,
            batch_size: Annotated[
                int, typer.Option("--batch-size", help="Per-device batch (PrefMatcher: 4).")
            ] = 4,
            grad_accum: Annotated[
                int, typer.Option("--grad-accum", help="Accumulation (PrefMatcher: 8).")
            ] = 8,
            max_length: MaxLenOpt = 4096,
            lora_r: Annotated[int, typer.Option("--lora-r", help="LoRA rank (PrefMatcher: 64).")] = 64,
            lora_alpha: Annotated[
                int, typer.Option("--lora-alpha", help="LoRA alpha (PrefMatcher: 128).")
            ] = 128,
            lora_dropout: Annotated[float, typer.Option("--lora-dropout", help="PrefMatcher: 0.0.")] = 0.0,
            target_modules: Annotated[
                str,
                typer.Option(
                    "--target-modules", help="Comma-separated (PrefMatcher: q, v, output projections)."
                ),
            ] = "q_proj,v_proj,o_proj",
            lora_top_layers: TopLayersOpt = None,
            gradient_checkpointing: CheckpointingOpt = True,
            qlora: QloraOpt = False,
            max_tokens: Annotated[int, typer.Option("--max-tokens", help="Student reply budget.")] = 512,
            seed: SeedOpt = 0,
        ) -> None:
            try:
                from personalign.train.recipes import train_judge, train_matcher

                settings = _settings(
                    "sft",
                    learning_rate=lr,
                    epochs=epochs,
                    max_steps=max_steps,
                    batch_size=batch_size,
                    grad_accum=grad_accum,
                    max_length=max_length,
                    lora_r=lora_r,
                    lora_alpha=lora_alpha,
                    lora_dropout=lora_dropout,
                    target_modules=target_modules,
                    lora_top_layers=lora_top_layers,
                    gradient_checkpointing=gradient_checkpointing,
                    qlora=qlora,
                    weight_decay=0.01,
                    seed=seed,
                )
                recipe = train_matcher if kind == "matcher" else train_judge
                report = recipe(
                    run,
                    base,
                    out,
                    settings,
                    held_out_fraction=held_out_fraction,
                    data=data,
                    max_tokens=max_tokens,
                    seed=seed,
                )
                _agreement(kind, report, out)
            except PersonalignError as exc:
                _fail(exc)

        return command

    train_app.command(
        "matcher", help="Distil a finished CUPID run's matcher into a small model; report held-out agreement."
    )(make_distil("matcher"))
    train_app.command(
        "judge",
        help="Distil a finished HiCUPID run's A/B judge into a small model (proxy judge); report held-out "
        "agreement and S.",
    )(make_distil("judge"))


def _fmt(value: object) -> str:
    return "n/a" if value is None else f"{float(value):.3f}"  # type: ignore[arg-type]


def _agreement(kind: str, report: dict[str, Any], out: Path) -> None:
    """Print the held-out agreement of a distilled student with its teacher."""
    held = report["held_out"]
    console.print(
        f"[bold]{kind}[/]: held-out agreement with the teacher over {held['items']} items "
        f"({held['calls']} calls, {held['unparseable_calls']} unparseable): "
        f"accuracy {_fmt(held['accuracy'])}, Cohen's kappa {_fmt(held['kappa'])}; "
        f"report {out / 'agreement.json'}"
    )
    if "teacher_labels" in held:
        console.print(f"  teacher labels {held['teacher_labels']}; student labels {held['student_labels']}")
    s = report.get("s")
    if isinstance(s, dict):
        console.print(
            f"[bold]{kind}[/]: S on {s['compared']} of {s['questions']} held-out questions: teacher "
            f"{_fmt(s['teacher']['mean'])} (total {_fmt(s['teacher']['total'])}), student "
            f"{_fmt(s['student']['mean'])} (total {_fmt(s['student']['total'])}); per-question Pearson r "
            f"{_fmt(s['pearson'])}"
        )

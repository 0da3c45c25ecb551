"""The training commands' recipes: load a benchmark's train split, build examples with the run's
context strategy, and train SFT, DPO or SFT-then-DPO (the CLI is a thin layer over these)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.benchmarks.hicupid.steps import InstructionRole
from personalign.train.examples import TrainExample, build_examples
from personalign.train.settings import TrainSettings
from personalign.train.trainer import MANIFEST, StageResult, train_stage


@dataclass(frozen=True)
class DataSettings:
    source: str = "fixture"
    splits: tuple[str, ...] = ("train",)
    instruction_role: InstructionRole = "system"
    limit: int | None = None


def load_examples(data: DataSettings, context: str) -> tuple[list[TrainExample], str, str | None]:
    """HiCUPID train examples with ``context``; (examples, data source, data sha256)."""
    dataset = load_hicupid(data.source)
    examples = asyncio.run(
        build_examples(
            dataset,
            splits=data.splits,
            context=context,
            instruction_role=data.instruction_role,
            limit=data.limit,
        )
    )
    return examples, dataset.source, dataset.sha256


def train(base: str, data: DataSettings, settings: TrainSettings, out: Path, resume: bool) -> StageResult:
    """One SFT or DPO stage."""
    examples, source, sha = load_examples(data, settings.context)
    return train_stage(base, examples, out, settings, data_source=source, data_sha256=sha, resume=resume)


def train_sft_dpo(
    base: str, data: DataSettings, sft: TrainSettings, dpo: TrainSettings, out: Path, resume: bool
) -> tuple[StageResult, StageResult]:
    """SFT into ``out/sft``, then DPO on the base with the SFT adapter merged, into ``out/dpo``.
    With ``resume``, a finished SFT stage (its manifest written) is reused, not retrained."""
    sft = replace(sft, kind="sft")
    dpo = replace(dpo, kind="dpo")
    sft_dir, dpo_dir = out / "sft", out / "dpo"
    examples, source, sha = load_examples(data, sft.context)
    if resume and (sft_dir / MANIFEST).is_file():
        first = StageResult(sft_dir, sft_dir / "adapter", [], 0.0, 0)
    else:
        first = train_stage(
            base,
            examples,
            sft_dir,
            sft,
            data_source=source,
            data_sha256=sha,
            resume=resume and (sft_dir / "checkpoints").is_dir(),
        )
    dpo_examples = examples if dpo.context == sft.context else load_examples(data, dpo.context)[0]
    second = train_stage(
        base,
        dpo_examples,
        dpo_dir,
        dpo,
        data_source=source,
        data_sha256=sha,
        merge=first.adapter,
        resume=resume and (dpo_dir / "checkpoints").is_dir(),
    )
    return first, second


def train_matcher(
    run_dir: Path,
    base: str,
    out: Path,
    settings: TrainSettings,
    *,
    held_out_fraction: float = 0.25,
    data: str | None = None,
    max_tokens: int = 512,
    seed: int = 0,
) -> dict[str, object]:
    """SFT a student on the run's matcher calls (train part), then report its agreement with the
    teacher on the held-out instances; written to ``out/agreement.json``."""
    from personalign.train.distil import distil
    from personalign.train.matcher import matcher_items, parse_labels

    return distil(
        matcher_items(run_dir, data),
        base,
        out,
        settings,
        source=str(run_dir),
        parse=parse_labels(),
        held_out_fraction=held_out_fraction,
        max_tokens=max_tokens,
        seed=seed,
    )


def train_judge(
    run_dir: Path,
    base: str,
    out: Path,
    settings: TrainSettings,
    *,
    held_out_fraction: float = 0.25,
    data: str | None = None,
    max_tokens: int = 512,
    seed: int = 0,
) -> dict[str, object]:
    """SFT a student on the HiCUPID run's judge calls (train part), then report its verdict
    agreement with the teacher and the S it gives on the held-out questions (``out/agreement.json``)."""
    from personalign.train.distil import distil
    from personalign.train.judge import judge_items, parse_verdict, score_report

    return distil(
        judge_items(run_dir, data),
        base,
        out,
        settings,
        source=str(run_dir),
        parse=parse_verdict,
        held_out_fraction=held_out_fraction,
        max_tokens=max_tokens,
        seed=seed,
        extra=score_report,
    )

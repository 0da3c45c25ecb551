"""SFT, DPO and SFT-then-DPO with TRL + PEFT LoRA (no hand-written training loop).

Each stage writes into its output directory: ``adapter/`` (the LoRA adapter and tokenizer),
``checkpoints/`` (resumable), ``metrics.jsonl`` (one line per logged step: loss, learning rate,
tokens/s) and ``manifest.json`` (data hash, base model, hyper-parameters, library versions).
``sft-dpo`` merges the SFT adapter into the base and trains a fresh DPO adapter on the merged
model, as the HiCUPID paper does; the DPO adapter names the SFT one in ``personalign_chain.json``
so ``hf/BASE?adapter=OUT/dpo/adapter`` loads both.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError
from personalign.llm.adapters import CHAIN_FILE
from personalign.llm.backends.hf import apply_adapters, load_model, load_tokenizer
from personalign.train.examples import TrainExample, examples_sha256
from personalign.train.settings import TrainSettings
from personalign.train.tokenize import dpo_record, tokenize_sft

LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "personalign")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class StageResult:
    out_dir: Path
    adapter: Path
    losses: list[float]
    seconds: float
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def qlora_available() -> bool:
    """QLoRA (4-bit base) only when a CUDA device and bitsandbytes are both present."""
    import importlib.util

    return _device() == "cuda" and importlib.util.find_spec("bitsandbytes") is not None


def _metrics_callback(path: Path) -> Any:
    from transformers import TrainerCallback

    class JsonlMetrics(TrainerCallback):  # type: ignore[misc]
        """Appends every log event (loss, learning rate, tokens/s...) to a JSONL file."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if not logs:
                return
            row = {"step": state.global_step, "epoch": state.epoch, "time": time.time(), **logs}
            with path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row, default=float) + "\n")

    return JsonlMetrics()


def _common_args(settings: TrainSettings, out_dir: Path) -> dict[str, Any]:
    device = _device()
    return {
        "output_dir": str(out_dir / "checkpoints"),
        "learning_rate": settings.lr,
        "num_train_epochs": settings.epochs,
        "max_steps": settings.max_steps,
        "per_device_train_batch_size": settings.batch_size,
        "gradient_accumulation_steps": settings.grad_accum,
        "warmup_steps": settings.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps
        "weight_decay": settings.weight_decay,
        "logging_steps": settings.logging_steps,
        "save_steps": settings.save_steps,
        "save_total_limit": 2,
        "seed": settings.seed,
        "report_to": [],
        "use_cpu": device == "cpu",
        "bf16": device == "cuda",
        "include_num_input_tokens_seen": "all",
        "disable_tqdm": False,
        "dataloader_num_workers": 0,
        "gradient_checkpointing": settings.gradient_checkpointing,
        "max_length": None,  # the examples are already fitted (left-truncated at turn boundaries)
    }


def linear_module_names(model: Any) -> list[str]:
    """The names of the linear layers inside the transformer blocks (what ``all-linear`` means:
    every linear layer but the output head)."""
    import torch

    names = {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"
    }
    return sorted(names)


def _peft_config(settings: TrainSettings, model: Any) -> Any:
    from peft import LoraConfig

    lora = settings.lora
    layers: list[int] | None = None
    targets: str | list[str] = lora.target_modules
    if "," in lora.target_modules:
        targets = [t.strip() for t in lora.target_modules.split(",") if t.strip()]
    if lora.top_layers is not None:
        n_layers = int(model.config.num_hidden_layers)
        layers = list(range(max(0, n_layers - lora.top_layers), n_layers))
        if targets == "all-linear":  # PEFT takes a layer subset only with named modules
            targets = linear_module_names(model)
        elif isinstance(targets, str):
            targets = [targets]
    return LoraConfig(
        layers_to_transform=layers,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def _base_model(base: str, device: str, merge: Path | None, qlora: bool) -> Any:
    """The model LoRA trains on: the base (with ``merge`` merged in); with ``qlora`` the base is
    loaded in 4-bit NF4 through bitsandbytes (CUDA only; a merged adapter needs full weights)."""
    if not qlora:
        model = load_model(base, device=device)
        return apply_adapters(model, merge) if merge is not None else model
    if not qlora_available():
        raise ConfigError("--qlora needs a CUDA device and bitsandbytes (pip install bitsandbytes)")
    if merge is not None:
        raise ConfigError("--qlora cannot merge an SFT adapter into a 4-bit base; train sft-dpo without it")
    import torch
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from personalign.llm.backends.hf import materialize

    where, _ = materialize(base)
    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_quant_storage=torch.bfloat16,  # lets FSDP shard the 4-bit weights (fsdp_qlora.yaml)
    )
    model = AutoModelForCausalLM.from_pretrained(where, quantization_config=quant, device_map={"": 0})
    return prepare_model_for_kbit_training(model)


def _last_checkpoint(out_dir: Path) -> str | None:
    found = sorted(
        (out_dir / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.rsplit("-", 1)[1])
    )
    return str(found[-1]) if found else None


def _trim_metrics(path: Path, keep_through_step: int) -> None:
    """Keep only the log rows of steps up to ``keep_through_step`` (0: start a fresh log)."""
    if not path.exists():
        return
    if keep_through_step <= 0:
        path.unlink()
        return
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    kept = [line for line in lines if int(json.loads(line).get("step", 0)) <= keep_through_step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _losses(path: Path) -> list[float]:
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [float(r["loss"]) for r in rows if "loss" in r]


def write_manifest(
    out_dir: Path,
    *,
    base: str,
    settings: TrainSettings,
    examples: Sequence[TrainExample],
    data_source: str,
    data_sha256: str | None,
    merged_before: Path | None,
    result: dict[str, Any],
) -> None:
    manifest = {
        "kind": settings.kind,
        "base_model": base,
        "merged_before": str(merged_before) if merged_before else None,
        "data": {
            "source": data_source,
            "sha256": data_sha256,
            "examples": len(examples),
            "examples_sha256": examples_sha256(examples),
        },
        "hyperparameters": settings.to_record(),
        "libraries": library_versions(),
        "python": platform.python_version(),
        "device": _device(),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "result": result,
    }
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _adapter_from_checkpoint(checkpoint: Path, adapter: Path) -> None:
    """Copy a checkpoint's LoRA weights and config into ``adapter`` (a finished resumed stage)."""
    import shutil

    adapter.mkdir(parents=True, exist_ok=True)
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        if not (checkpoint / name).is_file():
            raise ConfigError(f"--resume: {checkpoint} has no {name}")
        shutil.copy2(checkpoint / name, adapter / name)


def _fit(
    base: str,
    tokenizer: Any,
    examples: Sequence[TrainExample],
    out_dir: Path,
    settings: TrainSettings,
    *,
    merge: Path | None,
    checkpoint: str | None,
) -> tuple[int, float, int]:
    """Build the TRL trainer for the stage's kind, train (from ``checkpoint`` if given) and save the
    adapter into ``out_dir/adapter``; (global step, mean training loss, tokens in one epoch)."""
    from datasets import Dataset

    metrics = out_dir / "metrics.jsonl"
    device = _device()
    model = _base_model(base, device, merge, settings.qlora)
    common = _common_args(settings, out_dir)
    callbacks = [_metrics_callback(metrics)]
    if settings.kind == "sft":
        from trl import SFTConfig, SFTTrainer

        rows = [tokenize_sft(tokenizer, ex, settings.max_length).to_record() for ex in examples]
        n_tokens = sum(len(r["input_ids"]) for r in rows)
        trainer: Any = SFTTrainer(
            model=model,
            args=SFTConfig(**common),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=_peft_config(settings, model),
            callbacks=callbacks,
        )
    else:
        from trl import DPOConfig, DPOTrainer

        dpo_rows = [dpo_record(tokenizer, ex, settings.max_length) for ex in examples]
        n_tokens = 0
        for r in dpo_rows:
            for key in ("chosen", "rejected"):
                text = tokenizer.apply_chat_template(r["prompt"] + r[key], tokenize=False)
                n_tokens += len(tokenizer(text, add_special_tokens=False)["input_ids"])
        trainer = DPOTrainer(
            model=model,
            args=DPOConfig(**common, beta=settings.beta, loss_type=[settings.loss_type]),
            train_dataset=Dataset.from_list(
                [{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in dpo_rows]
            ),
            processing_class=tokenizer,
            peft_config=_peft_config(settings, model),
            callbacks=callbacks,
        )
    output = trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_model(str(out_dir / "adapter"))
    return int(output.global_step), float(output.training_loss), n_tokens


def train_stage(
    base: str,
    examples: Sequence[TrainExample],
    out_dir: Path,
    settings: TrainSettings,
    *,
    data_source: str,
    data_sha256: str | None = None,
    merge: Path | None = None,
    resume: bool = False,
) -> StageResult:
    """Train one LoRA stage (SFT or DPO) on ``examples`` into ``out_dir``; ``merge`` = an adapter
    merged into the base first (the SFT stage of sft-dpo); ``resume`` continues from the last
    checkpoint in ``out_dir`` (an error when there is none; one already at ``max_steps`` is the
    result: the trainer would skip its batches and then train a step more)."""
    if not examples:
        raise ConfigError("no training examples")
    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = _last_checkpoint(out_dir) if resume else None
    if resume and checkpoint is None:
        raise ConfigError(f"--resume: no checkpoint in {out_dir / 'checkpoints'}")
    metrics = out_dir / "metrics.jsonl"
    start_step = int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0
    if checkpoint is not None and 0 < settings.max_steps < start_step:
        raise ConfigError(
            f"--resume: {checkpoint} is past --max-steps {settings.max_steps}; "
            "raise --max-steps or train into a fresh --out"
        )
    _trim_metrics(metrics, start_step)  # a resumed run re-logs the steps after its checkpoint
    tokenizer = load_tokenizer(base)
    adapter = out_dir / "adapter"
    started = time.monotonic()
    if checkpoint is not None and start_step == settings.max_steps:
        # Already finished: the trainer would skip the seen batches and then train one step more.
        _adapter_from_checkpoint(Path(checkpoint), adapter)
        logged = _losses(metrics)
        steps, train_loss, n_tokens = start_step, (sum(logged) / len(logged) if logged else 0.0), 0
    else:
        steps, train_loss, n_tokens = _fit(
            base, tokenizer, examples, out_dir, settings, merge=merge, checkpoint=checkpoint
        )
    seconds = time.monotonic() - started
    tokenizer.save_pretrained(str(adapter))
    chain = adapter / CHAIN_FILE
    if merge is not None:
        chain.write_text(json.dumps({"merged_before": [str(merge.resolve())]}) + "\n", encoding="utf-8")
    elif chain.exists():
        chain.unlink()
    epochs_seen = (steps - start_step) * settings.batch_size * settings.grad_accum / max(1, len(examples))
    tokens = int(n_tokens * epochs_seen)
    result = {
        "global_step": steps,
        "train_loss": float(train_loss),
        "losses": _losses(metrics),
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else None,
        "resumed_from": checkpoint,
    }
    write_manifest(
        out_dir,
        base=base,
        settings=settings,
        examples=examples,
        data_source=data_source,
        data_sha256=data_sha256,
        merged_before=merge,
        result=result,
    )
    return StageResult(out_dir, adapter, _losses(metrics), seconds, tokens)

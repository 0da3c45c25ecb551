"""Training hyper-parameters. The defaults are the HiCUPID paper's (LoRA r 256, alpha 512, dropout
0.05 on all linear layers; SFT lr 1e-4; DPO lr 1e-6, beta 0.1, sigmoid loss); every one is overridable."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from personalign.errors import ConfigError

Kind = Literal["sft", "dpo"]
PAPER_LR: dict[str, float] = {"sft": 1e-4, "dpo": 1e-6}
DPO_LOSSES = (
    "sigmoid",
    "ipo",
    "hinge",
    "robust",
    "exo_pair",
    "nca_pair",
    "bco_pair",
    "sppo_hard",
    "apo_zero",
)


@dataclass(frozen=True)
class LoraSettings:
    r: int = 256
    alpha: int = 512
    dropout: float = 0.05
    target_modules: str = "all-linear"
    # Only the top N transformer layers get adapters (None = all, the paper's): gradients then stop
    # there, so a CPU smoke run's backward pass costs a fraction of the full one.
    top_layers: int | None = None

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1 or not 0 <= self.dropout < 1:
            raise ConfigError("LoRA needs r >= 1, alpha >= 1 and 0 <= dropout < 1")
        if self.top_layers is not None and self.top_layers < 1:
            raise ConfigError("--lora-top-layers must be >= 1")


@dataclass(frozen=True)
class TrainSettings:
    """One stage's settings. ``learning_rate`` None = the paper's for the stage's kind;
    ``max_steps`` > 0 overrides ``epochs``; effective batch = batch_size x grad_accum x devices."""

    kind: Kind
    learning_rate: float | None = None
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 1
    grad_accum: int = 1
    max_length: int | None = 4096
    beta: float = 0.1
    loss_type: str = "sigmoid"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    logging_steps: int = 1
    save_steps: int = 50
    context: str = "full"
    gradient_checkpointing: bool = True
    qlora: bool = False
    lora: LoraSettings = field(default_factory=LoraSettings)

    def __post_init__(self) -> None:
        if self.kind not in PAPER_LR:
            raise ConfigError(f"unknown training kind {self.kind!r}")
        if self.batch_size < 1 or self.grad_accum < 1:
            raise ConfigError("--batch-size and --grad-accum must be >= 1")
        if self.max_length is not None and self.max_length < 16:
            raise ConfigError("--max-length must be at least 16 tokens")
        if self.loss_type not in DPO_LOSSES:
            raise ConfigError(f"--loss-type must be one of {', '.join(DPO_LOSSES)}")
        if self.max_steps == 0 or (self.max_steps < 0 and self.epochs <= 0):
            raise ConfigError("train for --max-steps > 0 or --epochs > 0")

    @property
    def lr(self) -> float:
        return PAPER_LR[self.kind] if self.learning_rate is None else self.learning_rate

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["learning_rate"] = self.lr
        if self.kind == "sft":
            record.pop("beta")
            record.pop("loss_type")
        return record

"""A CUPID run's config (`CupidConfig`: what defines its results) and its defaults.

Kept apart from the evaluator (`steps.py`, which loads numpy and the model layer) so the spec, the
CLI's options and the finished-run check read it at the cost of a dataclass.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from personalign.benchmarks.cupid.context import CUPID_CONTEXTS
from personalign.benchmarks.cupid.judges import MatcherFormat
from personalign.benchmarks.cupid.protocol import PAPER_SUBJECT_MAX_TOKENS, SYSTEM_ROLES, SystemRole
from personalign.errors import ConfigError
from personalign.llm.spec import EMBEDDED_DEFAULT
from personalign.protocols.upstream import PROTOCOLS, Protocol

Task = Literal["inference", "generation", "both"]
TASKS = ("inference", "generation", "both")
SUBJECT_STEPS = ("infer", "generate")  # kept when re-scoring; summaries are kept too

SUBJECT_MAX_TOKENS = 1024
# The bundled 135M model answers the inference format in 15-70 tokens, but now and then runs on
# to the cap (a 1024-token ramble costs ~45 s on 2 cores); 256 leaves ample room for its answers.
EMBEDDED_SUBJECT_MAX_TOKENS = 256


def default_subject_max_tokens(subject: str, protocol: str = "personalign") -> int:
    """The subject's max_tokens when the user sets none: the official 8192 under `paper`,
    lower for the bundled local model."""
    if protocol == "paper":
        return PAPER_SUBJECT_MAX_TOKENS
    return EMBEDDED_SUBJECT_MAX_TOKENS if subject == EMBEDDED_DEFAULT else SUBJECT_MAX_TOKENS


# The matcher's reasoning field under `personalign` (a schema bound; the prompt asks for reasoning
# without a length, as the official one does). The bundled 135M model does not reason there: it
# writes the labels of the following entries over and over until the bound (481 of the 634 tokens
# it generated per demo instance went into that field). Its bound is a decoding budget for that
# model alone, not an instruction; every other matcher keeps the longer one.
MATCHER_REASONING_CHARS = 300
EMBEDDED_MATCHER_REASONING_CHARS = 100


def matcher_reasoning_chars(matcher: str) -> int:
    """The bound on each matcher result's reasoning field for `matcher` (`personalign` schema)."""
    return EMBEDDED_MATCHER_REASONING_CHARS if matcher == EMBEDDED_DEFAULT else MATCHER_REASONING_CHARS


# Context strategies the official evaluator has no prompt for (it formats raw dialogues only).
PAPER_UNSUPPORTED_CONTEXTS = ("summaries", "gold-preference")


@dataclass(frozen=True)
class CupidConfig:
    """Everything that defines a CUPID run's results (recorded in the manifest)."""

    subject: str
    decomposer: str
    matcher: str
    judge: str
    task: Task = "inference"
    context: str = "full"
    matcher_format: MatcherFormat = "default"
    subject_max_tokens: int = SUBJECT_MAX_TOKENS
    judge_max_tokens: int = 1024
    reasks: int = 1
    protocol: Protocol = "personalign"
    # Role of the judges' system message under `paper`: upstream sends OpenAI's `developer`.
    system_role: SystemRole = "system"

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"unknown protocol {self.protocol!r} (paper | personalign)")
        if self.system_role not in SYSTEM_ROLES:
            raise ConfigError(f"unknown system role {self.system_role!r} (system | developer)")
        if self.protocol == "paper" and self.context in PAPER_UNSUPPORTED_CONTEXTS:
            raise ConfigError(
                f"context {self.context!r} has no official prompt; use --protocol personalign with it"
            )
        if self.task not in TASKS:
            raise ConfigError(f"unknown task {self.task!r} (choose from {', '.join(TASKS)})")
        if self.context not in CUPID_CONTEXTS:
            raise ConfigError(f"unknown context {self.context!r} (choose from {', '.join(CUPID_CONTEXTS)})")
        if self.context == "gold-preference" and self.task != "generation":
            raise ConfigError(
                "context 'gold-preference' gives the answer away; use it with --task generation"
            )
        if self.matcher_format not in ("default", "prefmatcher"):
            raise ConfigError("matcher format must be 'default' or 'prefmatcher'")

    @property
    def truncation(self) -> Literal["score", "error"]:
        """What a reply cut at max_tokens becomes: `paper` scores the text it got (as upstream
        does), `personalign` records an error."""
        return "score" if self.protocol == "paper" else "error"

    @property
    def tasks(self) -> tuple[str, ...]:
        return ("inference", "generation") if self.task == "both" else (self.task,)

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

"""The result records written to `samples.jsonl`: one `InstanceRecord` per instance.

A record keeps every step's raw model output next to its parsed value and status, so a
result can be audited, re-scored or resumed without calling the subject model again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["ok", "error"]


class StepRecord(BaseModel):
    """One step of an instance's evaluation (a model call, or a decision made without one)."""

    role: str = Field(description="subject | decomposer | matcher | judge")
    model: str | None = Field(None, description="provider/model that answered; None when no call was needed")
    prompt: str | None = Field(None, description="template name")
    prompt_sha256: str | None = None
    status: Status = "ok"
    raw: list[str] = Field(
        default_factory=list, description="raw outputs, one per attempt (re-asks included)"
    )
    reasoning: list[str] = Field(
        default_factory=list, description="reasoning the backend returned apart from the text, per attempt"
    )
    finish_reasons: list[str | None] = Field(
        default_factory=list,
        description="why generation stopped, per attempt: stop | length (cut off at max_tokens) | "
        "content_filter | other | null (not reported)",
    )
    parsed: Any = None
    error: str | None = None
    errors: list[str] = Field(
        default_factory=list,
        description="earlier failures of this step (previous runs, rejected cached replies), oldest first",
    )
    flags: list[str] = Field(
        default_factory=list,
        description="e.g. truncated, empty, inline_reasoning, reask, refreshed, empty_inference, "
        "missing_section, temperature_not_sent (the model's rules left the temperature out)",
    )
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = Field(
        0, description="the part of completion_tokens spent thinking, where the provider reports it"
    )
    cost_usd: float | None = 0.0
    cached: bool = False
    latency_s: float = 0.0


class TaskResult(BaseModel):
    """The outcome of one task (e.g. inference, generation) on one instance."""

    status: Status
    error: str | None = None
    scores: dict[str, Any] = Field(default_factory=dict)


class InstanceRecord(BaseModel):
    instance_id: str
    meta: dict[str, Any] = Field(default_factory=dict)
    steps: dict[str, StepRecord] = Field(default_factory=dict)
    results: dict[str, TaskResult] = Field(default_factory=dict)

    @property
    def status(self) -> Status:
        return "ok" if self.results and all(r.status == "ok" for r in self.results.values()) else "error"


@dataclass
class RunOutcome:
    """How a run ended and its latest record per instance (here, not in runner.py, so the
    finished-run check builds one without loading the async runner)."""

    status: str  # complete | complete_with_errors | stopped_budget | interrupted
    evaluated: int
    skipped: int
    # Not in the repr: asyncio.run formats its finished main task (whose result this is) when it
    # restores the SIGINT handler, and a repr of every record costs ~0.1 s per 1,000 instances.
    records: dict[str, InstanceRecord] = field(default_factory=dict, repr=False)
    # Instances that waited for a reply (`Deferred`, batch mode) and were not written this pass.
    deferred: list[str] = field(default_factory=list, repr=False)

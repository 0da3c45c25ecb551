"""The messages a CUPID run sent for one instance, rebuilt for the viewer's instance page (the spec's
`view_messages` hook, read by `personalign view`).

A run stores each step's prompt name and hash, not the rendered messages. For CUPID the prompts are
pure functions of the run's config, the instance and earlier outputs (`steps.show_calls`, which
`personalign protocol show` prints), so the viewer renders them again from the run's data source
and the outputs the record holds. It says why when it cannot: data that cannot be read offline or
whose checksum changed, or the `summaries` context (its history took model calls).
"""

from __future__ import annotations

from typing import Any

from personalign.benchmarks.cupid.config import CupidConfig
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.protocol import load_paper_prompts
from personalign.benchmarks.cupid.steps import CupidPrompts, show_calls
from personalign.errors import PersonalignError
from personalign.runs.spec import RenderedMessages


class CupidMessages:
    """Rebuilds the messages of one CUPID run's instances; loads the run's data once."""

    def __init__(self, manifest: dict[str, Any]) -> None:
        self.manifest = manifest
        self._state: tuple[Any, dict[str, Any]] | str | None = None

    def _load(self) -> tuple[Any, dict[str, Any]] | str:
        data = self.manifest.get("data") or {}
        source = str(data.get("source") or "")
        try:
            config = CupidConfig(**(self.manifest.get("config") or {}))
            if config.context == "summaries":
                return "the summaries context built its history with model calls; it is not rebuilt here"
            paper = load_paper_prompts() if config.protocol == "paper" else None
            dataset = load_cupid("fixture" if source.startswith("fixture:") else source)
        except (PersonalignError, TypeError, ValueError, OSError) as exc:
            return f"the run's data or prompts cannot be read here ({exc})"
        if data.get("sha256") and dataset.sha256 and data["sha256"] != dataset.sha256:
            return f"{source} changed since the run (sha256 differs); its messages are not rebuilt"
        return CupidPrompts(config, paper), {i.id: i for i in dataset.instances}

    def render(self, record: dict[str, Any]) -> RenderedMessages:
        """The messages of every step of `record` that a run would have sent."""
        if self._state is None:
            self._state = self._load()
        if isinstance(self._state, str):
            return RenderedMessages({}, self._state)
        prompts, instances = self._state
        instance = instances.get(str(record.get("instance_id")))
        if instance is None:
            return RenderedMessages({}, "the instance is not in the run's data source any more")
        steps = record.get("steps") or {}

        def parsed(name: str) -> Any:
            return (steps.get(name) or {}).get("parsed")

        inferred = (parsed("infer") or {}).get("preference") or ""
        checklist = parsed("decompose") or []
        response = parsed("generate") or ""
        calls = show_calls(
            prompts,
            instance,
            "all",
            inferred=str(inferred),
            checklist=[str(c) for c in checklist] if isinstance(checklist, list) else [],
            response=str(response),
        )
        return RenderedMessages(
            {step: [(m.role, m.content) for m in call.messages] for step, _, call in calls if step in steps}
        )

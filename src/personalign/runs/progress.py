"""A progress bar with ETA, model calls, tokens, cache hits and cost."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from personalign.llm.usage import UsageTracker


class UsageColumn(ProgressColumn):
    def __init__(self, tracker: UsageTracker) -> None:
        super().__init__()
        self.tracker = tracker

    def render(self, task: Task) -> Text:
        t = self.tracker
        text = f"calls {t.calls}  cache {t.cache_hits}  tok {t.tokens:,}  ${t.cost_usd:.4f}"
        if t.errors:
            text += f"  errors {t.errors}"
        return Text(text, style="dim")


class RunProgress:
    def __init__(self, tracker: UsageTracker, total: int, label: str, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            UsageColumn(tracker),
            console=console,
            transient=False,
        )
        self._task = self._progress.add_task(label, total=total)

    def advance(self) -> None:
        self._progress.advance(self._task)

    def advance_by(self, n: int) -> None:
        """Count instances already finished in an earlier invocation."""
        self._progress.advance(self._task, n)

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._progress.stop()

"""Context strategies for CUPID: which prior sessions the subject sees, and how they are rendered.

- ``full``: all prior sessions (the paper's default);
- ``oracle``: only sessions that share the current contextual preference (the paper's oracle);
- ``oracle-factor``: only sessions with the current context factor (includes superseded ones);
- ``summaries``: every prior session, each replaced by the subject model's own summary;
- ``gold-preference``: no history; generation is given the gold preference (the paper's
  "oracle preference" setting; generation task only);
- ``memory``: the sessions the memory engine retrieves for the current request (no model calls:
  BM25 + MiniLM dense + exact names, fused; sessions naming the request's context first, newest
  first; ``MEMORY_K`` of them), shown in their original order.

Only the dialogue text is ever rendered; context factors and preferences are annotations.
"""

from __future__ import annotations

from typing import Literal

from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.history import format_history as format_history  # re-exported for the CUPID benchmark
from personalign.history import format_session as format_session
from personalign.memory.strategy import retrieve_sessions, shared_embedder
from personalign.types import Session

CupidContext = Literal["full", "oracle", "oracle-factor", "summaries", "gold-preference", "memory"]
CUPID_CONTEXTS: tuple[str, ...] = (
    "full",
    "oracle",
    "oracle-factor",
    "summaries",
    "gold-preference",
    "memory",
)
# CUPID builds every current preference on exactly 2 prior sessions, so the strategy shows 2
# (docs/memory.md gives memory-eval at k=2 and k=3).
MEMORY_K = 2


def select_sessions(instance: CupidInstance, context: str) -> tuple[Session, ...]:
    """The prior sessions a context strategy shows, in their original order."""
    if context in ("full", "summaries"):
        return instance.prior_interactions
    if context == "oracle":
        return instance.oracle_sessions()
    if context == "oracle-factor":
        return instance.same_factor_sessions()
    if context == "gold-preference":
        return ()
    if context == "memory":
        positions = retrieve_sessions(
            [s.dialogue for s in instance.prior_interactions],
            instance.current_request,
            k=MEMORY_K,
            embedder=shared_embedder(),
        )
        return tuple(instance.prior_interactions[i] for i in sorted(positions))
    raise ValueError(f"unknown CUPID context strategy {context!r} (known: {', '.join(CUPID_CONTEXTS)})")

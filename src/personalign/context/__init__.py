"""How prior history is shown to the subject model: the context strategies."""

from personalign.context.cupid import (
    CUPID_CONTEXTS,
    CupidContext,
    format_history,
    format_session,
    select_sessions,
)

__all__ = ["CUPID_CONTEXTS", "CupidContext", "format_history", "format_session", "select_sessions"]

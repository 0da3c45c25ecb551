"""Rendering of prior sessions as a subject model sees them: markdown speaker blocks, numbered sessions.

Shared by the CUPID context strategies and the memory engine's memory block, so it sits in the core
(below both) rather than in either of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from personalign.types import Session

SPEAKER = {"user": "User", "assistant": "AI Assistant", "system": "System"}


def format_session(session: Session) -> str:
    """One session's dialogue as markdown blocks, without its annotations."""
    return "\n\n".join(f"#### {SPEAKER[m.role]}\n{m.content.strip()}" for m in session.dialogue)


def format_history(bodies: Sequence[str]) -> str:
    """Number the sessions chronologically and separate them with rules."""
    if not bodies:
        return "(no earlier conversations)"
    return "\n\n---\n\n".join(f"### Session {k}\n\n{body}" for k, body in enumerate(bodies, start=1))


_TOKEN = re.compile(r"\w+|[^\w\s]")


def approx_tokens(text: str) -> int:
    """Words and punctuation marks: a tokenizer-free stand-in for prompt tokens (ratios only)."""
    return len(_TOKEN.findall(text))

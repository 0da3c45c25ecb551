"""One redaction for secrets in URLs and model specs, applied wherever a spec or URL is shown or stored.

`redact_text` replaces URL userinfo (``http://user:KEY@host`` -> ``http://***@host``) and the value
of any secret-looking query parameter (``?api_key=...``, ``token``, ``secret``, ``password``,
``auth``, ...) with ``***``. It knows no other part of the package, so every layer can use it.
"""

from __future__ import annotations

import re

MASK = "***"

# Values stop at quotes and backslashes, so redacting JSON text keeps it valid JSON.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#@\"'\\]+@")
_SECRET_NAME = r"[^=&\s#?\"']*(?:key|token|secret|passw|pwd|auth|credential|signature|session)[^=&\s#?\"']*"
_SECRET_QUERY = re.compile(rf"(?i)(?P<name>[?&;]{_SECRET_NAME}=)(?P<value>[^&\s#\"'\\]+)")
# Names that hold no secret themselves (key_env names the variable that holds the key).
_NOT_SECRET = {"key_env"}


def _mask_query(match: re.Match[str]) -> str:
    name = match.group("name")
    return match.group(0) if name[1:-1].lower() in _NOT_SECRET else name + MASK


def redact_text(text: str) -> str:
    """`text` with URL userinfo and secret-looking query values replaced by ``***``."""
    if "@" in text:
        text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    if "=" in text:
        text = _SECRET_QUERY.sub(_mask_query, text)
    return text


def redact_secret(text: str, secret: str | None) -> str:
    """`redact_text`, and also every occurrence of a known secret value (an API key read from the env)."""
    if secret:
        text = text.replace(secret, MASK)
    return redact_text(text)


def safe(text: object) -> str:
    """Text fit for a Rich `console.print`: secrets redacted and markup escaped, so `[hf]` stays `[hf]`."""
    from rich.markup import escape

    return escape(redact_text(str(text)))

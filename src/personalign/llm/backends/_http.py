"""Shared HTTP helpers: error classification, Retry-After parsing and secret scrubbing."""

from __future__ import annotations

import email.utils
import os
import time
from typing import TYPE_CHECKING

from personalign.errors import ConfigError, ModelCallError
from personalign.redact import redact_secret

if TYPE_CHECKING:  # httpx costs ~40 ms to import; plain-http endpoints never need it
    import httpx

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


def read_key(key_env: str | None, label: str) -> str | None:
    """Read an API key from the environment variable the user named; never log it."""
    if not key_env:
        return None
    value = os.environ.get(key_env)
    if not value:
        raise ConfigError(f"{label}: environment variable {key_env} is not set (it should hold the API key)")
    return value


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def scrub(text: str, secret: str | None) -> str:
    """`text` without the API key, URL credentials or secret-looking query values."""
    return redact_secret(text, secret)


def status_error(response: httpx.Response, label: str, secret: str | None) -> ModelCallError:
    return http_status_error(
        response.status_code, response.text, response.headers.get("retry-after"), label, secret
    )


def http_status_error(
    status: int, text: str, retry_after: str | None, label: str, secret: str | None
) -> ModelCallError:
    body = scrub(text[:300], secret).replace("\n", " ")
    return ModelCallError(
        f"{label}: HTTP {status}: {body}",
        retryable=status in RETRYABLE_STATUS,
        retry_after=parse_retry_after(retry_after),
        status_code=status,
    )


def transport_error(exc: httpx.HTTPError, label: str) -> ModelCallError:
    kind = type(exc).__name__
    return ModelCallError(scrub(f"{label}: {kind}: {exc}", None), retryable=True)

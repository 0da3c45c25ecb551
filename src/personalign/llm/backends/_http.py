"""Shared HTTP helpers: error classification, Retry-After parsing and secret scrubbing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from personalign.errors import ConfigError, ModelCallError
from personalign.llm.ratelimit import parse_retry_after, rate_headers
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


def scrub(text: str, secret: str | None) -> str:
    """`text` without the API key, URL credentials or secret-looking query values."""
    return redact_secret(text, secret)


def status_error(response: httpx.Response, label: str, secret: str | None) -> ModelCallError:
    return http_status_error(
        response.status_code, response.text, rate_headers(response.headers), label, secret
    )


def http_status_error(
    status: int, text: str, headers: dict[str, str], label: str, secret: str | None
) -> ModelCallError:
    """The error for a non-200 answer; `headers` are its rate-limit headers (`rate_headers`)."""
    body = scrub(text[:300], secret).replace("\n", " ")
    retry_after = None
    if "retry-after-ms" in headers:  # OpenAI's, finer than retry-after's whole seconds
        try:
            retry_after = max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            retry_after = None
    if retry_after is None:
        retry_after = parse_retry_after(headers.get("retry-after"))
    return ModelCallError(
        f"{label}: HTTP {status}: {body}",
        retryable=status in RETRYABLE_STATUS,
        retry_after=retry_after,
        status_code=status,
        headers=headers or None,
    )


def transport_error(exc: httpx.HTTPError, label: str) -> ModelCallError:
    kind = type(exc).__name__
    return ModelCallError(scrub(f"{label}: {kind}: {exc}", None), retryable=True)

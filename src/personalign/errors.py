"""Exceptions shared across personalign. Each names what went wrong and where."""

from __future__ import annotations


class PersonalignError(Exception):
    """Base class for every error personalign raises on purpose."""


class ConfigError(PersonalignError):
    """A user-supplied option, model spec or file is unusable."""


class DataError(PersonalignError):
    """A dataset file or row does not match its schema.

    The message always names the file, the row (0-based, as stored) and the field.
    """

    def __init__(self, source: str, row: int | None, field: str | None, message: str) -> None:
        self.source = source
        self.row = row
        self.field = field
        self.detail = message
        where = source
        if row is not None:
            where += f", row {row}"
        if field:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


class ModelCallError(PersonalignError):
    """A model call failed (after retries, where the failure was retryable)."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        status_code: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status_code = status_code
        # The error response's rate-limit headers (`llm.ratelimit.rate_headers`), for adaptation.
        self.headers = headers


class BudgetExceeded(PersonalignError):
    """The run's cost cap was reached; no further paid calls are made."""


class ParseError(PersonalignError):
    """A model's output could not be parsed into the structure a step needs."""

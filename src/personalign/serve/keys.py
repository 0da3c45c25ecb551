"""API keys of the gateway: each maps to a tenant; only a salted sha256 of the secret is stored.

A key reads ``pk_<key id>_<secret>``: the id finds the record, the secret is checked against
``sha256(salt || secret)`` in constant time. The keys file is JSON Lines, one record per key
(written by ``personalign serve keys add``); it never holds a usable key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from personalign.errors import ConfigError, DataError

PREFIX = "pk_"
_KEY = re.compile(r"^pk_([a-z0-9]{8,32})_([A-Za-z0-9_-]{16,128})$")
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    """One key's stored record: who it belongs to and its limits, never the secret itself."""

    key_id: str
    tenant: str
    salt: str
    sha256: str
    rate: float = 10.0  # requests per second, sustained
    burst: int = 20  # requests allowed at once
    default_user: str | None = None  # used when a request names no user (e.g. a benchmark client)
    revoked: bool = False

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(digest(self.salt, secret), self.sha256)


def check_tenant(tenant: str) -> str:
    if not _TENANT.match(tenant):
        raise ConfigError(
            f"tenant {tenant!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return tenant


def new_key(
    tenant: str, *, rate: float = 10.0, burst: int = 20, default_user: str | None = None
) -> tuple[str, ApiKey]:
    """A fresh key: the plaintext (shown once) and the record to store."""
    check_tenant(tenant)
    if rate <= 0 or burst < 1:
        raise ConfigError("rate must be > 0 and burst >= 1")
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_hex(16)
    record = ApiKey(key_id, tenant, salt, digest(salt, secret), rate, burst, default_user)
    return f"{PREFIX}{key_id}_{secret}", record


class KeyRing:
    """The keys the gateway accepts, by key id."""

    def __init__(self, keys: Iterable[ApiKey] = ()) -> None:
        self._keys = {k.key_id: k for k in keys}

    def __len__(self) -> int:
        return len(self._keys)

    def records(self) -> list[ApiKey]:
        return list(self._keys.values())

    def add(self, key: ApiKey) -> None:
        self._keys[key.key_id] = key

    def authenticate(self, presented: str) -> ApiKey | None:
        """The key record for a presented key, or None (unknown, malformed, wrong secret, revoked)."""
        match = _KEY.match(presented)
        if match is None:
            return None
        record = self._keys.get(match.group(1))
        if record is None or record.revoked or not record.matches(match.group(2)):
            return None
        return record

    @classmethod
    def load(cls, path: Path) -> KeyRing:
        """Read a keys file; a bad line is refused with its file, row and field."""
        ring = cls()
        if not path.exists():
            return ring
        for row, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise DataError(str(path), row, "line", f"not JSON: {exc}") from None
            if not isinstance(data, dict):
                raise DataError(str(path), row, "line", "not a JSON object")
            for name in ("key_id", "tenant", "salt", "sha256"):
                if not isinstance(data.get(name), str) or not data[name]:
                    raise DataError(str(path), row, name, "missing or not a string")
            try:
                check_tenant(data["tenant"])
                bytes.fromhex(data["salt"])
                key = ApiKey(
                    key_id=data["key_id"],
                    tenant=data["tenant"],
                    salt=data["salt"],
                    sha256=data["sha256"],
                    rate=float(data.get("rate", 10.0)),
                    burst=int(data.get("burst", 20)),
                    default_user=data.get("default_user"),
                    revoked=bool(data.get("revoked", False)),
                )
            except (ConfigError, ValueError, TypeError) as exc:
                raise DataError(str(path), row, "record", str(exc)) from None
            ring.add(key)
        return ring

    def save(self, path: Path) -> None:
        """Write the keys file atomically (owner-only permissions)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        text = "".join(json.dumps(asdict(k), sort_keys=True) + "\n" for k in self._keys.values())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)

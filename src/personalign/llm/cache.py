"""One SQLite cache for every model call.

The key is a hash of everything that changes the output: provider, model, messages and the
full `GenerateConfig`. Retries, timeouts, concurrency and base URLs are not part of it, so a
model moved to another port still hits its cache. Errors are never stored, and a reply that a
step rejected (unparseable, truncated, empty) is evicted (`delete`), so a re-run asks again.

Processes sharing one cache file never pay twice for one call: before calling, a process
*claims* the key (`claim`); another process that needs the same key meanwhile waits for the
answer instead of calling. A claim dies with its process (the holder's pid is checked) or
when it expires.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from personalign.llm.types import GenerateConfig
from personalign.types import Message
from personalign.userdirs import cache_root

CACHE_VERSION = 1


def default_cache_path() -> Path:
    return cache_root() / "calls.sqlite"


@functools.lru_cache(maxsize=1024)  # >= the prompts of all instances in flight
def json_string(text: str) -> str:
    """`text` as a JSON string literal, exactly as `json.dumps(..., ensure_ascii=False)` writes it.

    Memoized: a prompt is escaped once for its cache key and reused for the request body
    (escaping runs at ~6 ns per character, ~55 us for a 9 kB CUPID history).
    """
    return json.dumps(text, ensure_ascii=False)


_CONFIG_JSON: dict[int, tuple[GenerateConfig, str]] = {}


def config_json(config: GenerateConfig) -> str:
    """`config.cache_fields()` as canonical JSON (sorted keys, compact), once per config object."""
    hit = _CONFIG_JSON.get(id(config))
    if hit is not None and hit[0] is config:
        return hit[1]
    text = json.dumps(config.cache_fields(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    if len(_CONFIG_JSON) >= 256:
        _CONFIG_JSON.clear()
    _CONFIG_JSON[id(config)] = (config, text)  # holding `config` keeps its id from being reused
    return text


def cache_key(model_label: str, messages: Sequence[Message], config: GenerateConfig) -> str:
    """sha256 of the canonical JSON of {config, messages, model, v}.

    The JSON is assembled from parts (keys in sorted order, compact separators) so that the
    config's JSON and each message's escaping are computed once; the bytes are identical to
    ``json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))``, so keys
    are unchanged from earlier versions and existing caches stay valid.
    """
    rendered = ",".join(f"[{json_string(m.role)},{json_string(m.content)}]" for m in messages)
    blob = (
        f'{{"config":{config_json(config)},"messages":[{rendered}],'
        f'"model":{json_string(model_label)},"v":{CACHE_VERSION}}}'
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CallCache:
    """A thread-safe key/value store of successful completions.

    Writes are grouped: a `put` commits at once when the last commit is older than
    `commit_interval` seconds, else the cache's committer thread commits everything written
    meanwhile in one transaction at most `commit_interval` later. So at low call rates every entry is durable
    as soon as it is written, and at hundreds of calls per second the event loop does not pay
    for one commit (and the periodic WAL checkpoint's fsync) per call. This connection sees
    its own writes at once; other processes see them once committed (at most
    `commit_interval` later). `flush()` and `close()` commit immediately, and every cache still
    open is flushed when the interpreter exits (also after an unhandled exception); only a
    process killed outright (SIGKILL, power loss) can lose the last `commit_interval` of
    answers, which a resumed run simply asks again.
    """

    def __init__(self, path: str | Path, *, commit_interval: float = 0.05) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.commit_interval = commit_interval
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self._dirty = False
        self._last_commit = 0.0
        self._due: float | None = None  # when the pending writes must be committed
        self._committer: _Committer | None = None
        self._closing = threading.Event()
        with self._lock:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, model TEXT NOT NULL,"
                " payload TEXT NOT NULL, created REAL NOT NULL)"
            )
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL,"
                " expires REAL NOT NULL)"
            )
            self._conn.commit()
        # host|pid|token: the token tells apart two caches of one process.
        self.owner = f"{socket.gethostname()}|{os.getpid()}|{uuid.uuid4().hex[:12]}"
        _OPEN_CACHES.add(self)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT payload FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def delete(self, key: str) -> None:
        """Evict one entry (a reply a step rejected), committed at once so no process reuses it."""
        with self._lock:
            self._conn.execute("DELETE FROM calls WHERE key = ?", (key,))
            self._dirty = True
            self._commit_locked()

    def claim(self, key: str, ttl: float) -> dict[str, Any] | bool:
        """Reserve `key` for a call by this process for at most `ttl` seconds.

        Returns the stored payload when the answer is already there, True when the claim is ours
        (call, then `put` or `release`), False when a live process holds it (wait and ask again).
        The insert comes first: it takes SQLite's write lock, held until this connection commits,
        so reading the holder and taking over a dead or expired claim are atomic across processes
        (another process's claim waits for that commit, then sees ours).
        """
        now = time.time()
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO claims (key, owner, expires) VALUES (?, ?, ?)",
                (key, self.owner, now + ttl),
            )
            self._dirty = True
            rows = self._conn.execute("SELECT payload FROM calls WHERE key = ?", (key,)).fetchall()
            if rows:
                self._conn.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))
                self._schedule_commit_locked()
                return json.loads(rows[0][0])  # type: ignore[no-any-return]
            ((owner, expires),) = self._conn.execute(
                "SELECT owner, expires FROM claims WHERE key = ?", (key,)
            ).fetchall()
            if owner != self.owner and expires > now and _owner_alive(owner):
                self._schedule_commit_locked()
                return False
            if owner != self.owner:  # taken over from a dead or expired holder
                self._conn.execute(
                    "UPDATE claims SET owner = ?, expires = ? WHERE key = ?", (self.owner, now + ttl, key)
                )
            self._schedule_commit_locked()
            return True

    def release(self, key: str) -> None:
        """Give up this process's claim on `key` (the call failed; another may try)."""
        with self._lock:
            self._conn.execute("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.owner))
            self._dirty = True
            self._schedule_commit_locked()

    def put(self, key: str, model: str, payload: dict[str, Any]) -> None:
        blob = json.dumps(payload, ensure_ascii=False)
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO calls (key, model, payload, created) VALUES (?, ?, ?, ?)",
                (key, model, blob, time.time()),
            )
            self._conn.execute("DELETE FROM claims WHERE key = ?", (key,))
            self._dirty = True
            self._schedule_commit_locked()

    def _schedule_commit_locked(self) -> None:
        """Commit now if the last commit is older than `commit_interval`, else within it."""
        now = time.monotonic()
        if now - self._last_commit >= self.commit_interval:
            self._commit_locked()
        elif self._due is None:
            self._due = self._last_commit + self.commit_interval
            if self._committer is None:  # one thread per cache, started on the first burst
                self._committer = _Committer(self)
                self._committer.start()
            self._committer.pending = self  # kept alive until the commit, even if dropped
            self._committer.wake.set()

    def _commit_locked(self) -> None:
        if self._dirty:
            self._conn.commit()
            self._dirty = False
        self._last_commit = time.monotonic()
        self._due = None

    def _commit_when_due(self) -> None:
        """Run by the committer thread: wait until the pending writes are due, then commit."""
        while True:
            with self._lock:
                if self._due is None or self._closing.is_set():
                    return
                delay = self._due - time.monotonic()
                if delay <= 0:
                    self._commit_locked()
                    return
            self._closing.wait(delay)

    def flush(self) -> None:
        """Commit every entry written so far (visible to other connections from now on)."""
        with self._lock:
            if self._dirty or self._due is not None:
                self._commit_locked()

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        if self._closing.is_set():
            return
        with self._lock:  # claims left by calls that never finished (e.g. cancelled)
            self._conn.execute("DELETE FROM claims WHERE owner = ?", (self.owner,))
            self._dirty = True
        self.flush()
        self._closing.set()
        if self._committer is not None:
            self._committer.wake.set()  # lets the thread see the closed cache and end
        with self._lock:
            self._conn.close()
        _OPEN_CACHES.discard(self)


class _Committer(threading.Thread):
    """Commits a cache's grouped writes when they fall due. It holds the cache strongly only
    while a commit is pending (`pending`), so an unclosed cache dropped by its owner still
    commits its last burst and is then collected, which ends the thread."""

    def __init__(self, cache: CallCache) -> None:
        super().__init__(name="personalign-cache-commit", daemon=True)
        self.wake = threading.Event()
        self.pending: CallCache | None = None
        self._cache = weakref.ref(cache)
        weakref.finalize(cache, self.wake.set)

    def run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            cache = self.pending if self.pending is not None else self._cache()
            self.pending = None
            if cache is None or cache._closing.is_set():
                return
            cache._commit_when_due()
            del cache


_OPEN_CACHES: weakref.WeakSet[CallCache] = weakref.WeakSet()


def _owner_alive(owner: str) -> bool:
    """Whether the process named by a claim's owner (host|pid|token) may still be running.

    Only a process on this host can be checked; one elsewhere counts as alive until its claim expires.
    """
    host, _, rest = owner.partition("|")
    pid_text = rest.partition("|")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@atexit.register
def _flush_open_caches() -> None:
    for cache in list(_OPEN_CACHES):
        with contextlib.suppress(sqlite3.Error):  # a connection already broken at exit
            cache.flush()

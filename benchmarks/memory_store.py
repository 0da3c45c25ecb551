"""The two memory stores side by side: SQLite file vs PostgreSQL, at 10^4-10^5 stored sessions.

    .venv/bin/python benchmarks/memory_store.py [--sessions 10000 100000] [--per-user 100]
        [--samples 200] [--postgres postgresql://user@host:port/db]

Without ``--postgres`` a throwaway PostgreSQL server is started from the system's binaries (as the
tests do: tests/support/postgres.py; fsync off, so write figures are those of a server whose disk
is not the bottleneck). Layout: users of ``--per-user`` sessions each (5 turns and one random unit
vector per session under the ``hash`` embedder's name, 512-d), loaded with ``add_sessions`` in
batches of 100. Then, on the full store, latency p50/p99 (ms) of the calls a gateway request makes:

- ``add_session``: record one session of 5 turns with its vector (one transaction);
- ``add_memory``: one preference, with supersession (one transaction);
- ``user_version``: the freshness check before every retrieval;
- ``sessions`` (cold): load all of a user's sessions with turns (an index's first build);
- ``search_vectors``: exact cosine over one user's session vectors;
- ``retrieve`` (warm): ``MemoryEngine.retrieve`` with the query vector given (index cached,
  BM25 + dense + exact names), i.e. the store's share of a request plus the in-process search;
- ``delete_user``: everything of one user, in one transaction.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from personalign.memory import MemoryBackend, MemoryEngine, NewSession, open_store  # noqa: E402
from personalign.retrieval import load_embedder  # noqa: E402

EMBEDDER = load_embedder("hash")  # offline and fast; memories are encoded with it, sessions given
DIM = EMBEDDER.dim


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(20000)}" for _ in range(n))


def session(rng: random.Random) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"Draft the update for Dr {words(rng, 2)} about {words(rng, 10)}."},
        {"role": "assistant", "content": f"Here is a draft: {words(rng, 40)}."},
        {"role": "user", "content": f"Lead with the numbers. {words(rng, 6)}"},
        {"role": "assistant", "content": f"Revised: {words(rng, 30)}."},
        {"role": "user", "content": "Thanks, that works."},
    ]


def unit_vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    m = rng.standard_normal((n, DIM)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def load(store: MemoryBackend, n_sessions: int, per_user: int, embedder: str) -> tuple[list[str], float]:
    """Fill the store; return the user ids and the load rate (sessions per second)."""
    rng, vrng = random.Random(n_sessions), np.random.default_rng(n_sessions)
    users = [f"user{u}" for u in range(max(1, n_sessions // per_user))]
    start = time.perf_counter()
    for user in users:
        store.add_user(user)
        vectors = unit_vectors(vrng, per_user)
        for at in range(0, per_user, 100):
            store.add_sessions(
                user,
                [
                    NewSession(session(rng), timestamp=float(at + i), vectors={embedder: vectors[at + i]})
                    for i in range(min(100, per_user - at))
                ],
            )
    return users, len(users) * per_user / (time.perf_counter() - start)


def timed(samples: int, call: Callable[[int], object]) -> tuple[float, float]:
    times = []
    for i in range(samples):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def measure(url: str, n_sessions: int, per_user: int, samples: int) -> dict[str, object]:
    embedder = EMBEDDER
    store = open_store(url)
    users, rate = load(store, n_sessions, per_user, embedder.name)
    rng, vrng = random.Random(1), np.random.default_rng(1)
    picks = [rng.choice(users) for _ in range(samples)]
    extra = unit_vectors(vrng, samples)
    out: dict[str, object] = {"load sessions/s": f"{rate:.0f}"}
    out["add_session"] = timed(
        samples,
        lambda i: store.add_session(picks[i], session(rng), vectors={embedder.name: extra[i]}),
    )
    out["add_memory"] = timed(
        samples, lambda i: store.add_memory(picks[i], f"pref {i}", context_factor=f"factor {i % 5}")
    )
    out["user_version"] = timed(samples, lambda i: store.user_version(picks[i]))
    out["sessions (cold)"] = timed(samples, lambda i: store.sessions(picks[i]))
    query = unit_vectors(vrng, 1)[0]
    out["search_vectors"] = timed(
        samples, lambda i: store.search_vectors(picks[i], "s", embedder.name, query, 5)
    )
    engine = MemoryEngine(store, embedder=embedder)
    warm = sorted(set(picks))[:20]
    for user in warm:
        engine.retrieve(user, "warm up", query_vector=query)
    out["retrieve (warm)"] = timed(
        samples, lambda i: engine.retrieve(warm[i % len(warm)], "update for Dr w12", query_vector=query)
    )
    victims = [f"victim{i}" for i in range(max(1, samples // 10))]
    for victim in victims:  # users like the others: per_user sessions with vectors, a few memories
        store.add_user(victim)
        vectors = unit_vectors(vrng, per_user)
        store.add_sessions(
            victim,
            [NewSession(session(rng), vectors={embedder.name: vectors[i]}) for i in range(per_user)],
        )
        for i in range(5):
            store.add_memory(victim, f"pref {i}", context_factor=f"factor {i % 3}")
    out["delete_user"] = timed(len(victims), lambda i: store.delete_user(victims[i]))
    out["problems"] = len(store.check())
    store.close()
    return out


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[Callable[[str], str]]:
    """Yield a function giving a fresh database URL per run (on ``url``'s server or a throwaway one)."""
    if url is not None:
        yield lambda name: url
        return
    from tests.support.postgres import postgres_server

    with postgres_server() as server:
        yield server.create_database


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[10_000])
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--postgres", help="an existing (empty) database; default: a throwaway server")
    args = parser.parse_args()
    rows: dict[str, dict[str, object]] = {}
    with postgres(args.postgres) as new_database, tempfile.TemporaryDirectory() as tmp:
        for n in args.sessions:
            for backend in ("sqlite", "postgresql"):
                url = str(Path(tmp) / f"m{n}.sqlite") if backend == "sqlite" else new_database(f"bench_{n}")
                print(f"... {backend} with {n} sessions", file=sys.stderr, flush=True)
                rows[f"{backend} {n}"] = measure(url, n, args.per_user, args.samples)
    columns = list(rows)
    print(f"## Memory stores side by side ({args.per_user} sessions per user; p50 / p99 ms)\n")
    print("| call | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for metric in next(iter(rows.values())):
        cells = []
        for column in columns:
            value = rows[column][metric]
            cells.append(f"{value[0]:.2f} / {value[1]:.2f}" if isinstance(value, tuple) else str(value))
        print(f"| {metric} | " + " | ".join(cells) + " |")
    print(f"\nload average at the end: {tuple(round(x, 2) for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

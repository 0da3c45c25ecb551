"""Speed of the memory engine: ingestion rate and retrieval latency as the store grows.

    .venv/bin/python benchmarks/memory_speed.py [--sizes 1000 10000 100000] [--queries 200]

1. Ingestion (no extraction): sessions per second through ``MemoryEngine.add_session`` (one
   transaction each, WAL) and through ``add_sessions`` in batches of 64 (one encoder batch and one
   transaction per batch), with no embedder, the ``hash`` embedder and the default MiniLM embedder.
2. Retrieval latency p50/p99 of ``MemoryEngine.retrieve`` (BM25 + dense + exact names, fused) with the
   MiniLM query encoding inside the timing, and search only (query vector given), at each size, for
   two layouts of the same store size:
   ``one-user`` (a single user holds every session: the worst case) and ``many-users`` (users of
   100 sessions each: the usual case; the query searches one user's history).
   At scale the stored session vectors are random unit vectors under MiniLM's name (the search cost
   does not depend on their values; encoding 10^5 sessions would take minutes on 2 cores).
Prints the growth ratio of p50 from the smallest to the largest size (target p50 <= 5 ms at 10^5).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from personalign.memory import MemoryEngine, MemoryStore, NewSession  # noqa: E402
from personalign.retrieval import load_embedder  # noqa: E402

_NAMES = """Ines Tomas Priya Rosa Haruka Omar Lena Marco Sade Yuki Arjun Clara Felix Nadia Oskar Wen
    Okafor Reyes Raman Delgado Sato Haddad Berg Rossi Adeyemi Tanaka Mehta Novak Brandt Ivanova Lund Chen"""
FIRST, LAST = _NAMES.split()[:16], _NAMES.split()[16:]
_TASKS = "update report agenda email proposal summary checklist plan brief memo slides budget"
TASKS = _TASKS.split()
FEEDBACK = [
    "Keep it to three bullet points.",
    "Lead with the numbers and leave out interpretation.",
    "Use a warm, informal tone.",
    "Put the deadline in bold at the top.",
    "Write it as a table, not prose.",
    "Skip the pleasantries and get to the point.",
]


def words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(20000)}" for _ in range(n))


def make_session(rng: random.Random) -> tuple[list[dict[str, str]], str]:
    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    task = rng.choice(TASKS)
    turns = [
        {"role": "user", "content": f"Can you draft the {task} for {name}? It covers {words(rng, 12)}."},
        {"role": "assistant", "content": f"Here is a draft {task}: {words(rng, 40)}."},
        {"role": "user", "content": rng.choice(FEEDBACK) + " " + words(rng, 6)},
        {"role": "assistant", "content": f"Revised: {words(rng, 30)}."},
        {"role": "user", "content": "Thanks, that works."},
    ]
    return turns, f"{name} wants the {task} about {words(rng, 4)}"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def ingestion(n: int) -> None:
    print(f"## Ingestion without extraction ({n} sessions, 5 turns each, one transaction per session)")
    for spec in (None, "hash", "minilm"):
        rng = random.Random(0)
        sessions = [make_session(rng)[0] for _ in range(n)]
        with tempfile.TemporaryDirectory() as tmp:
            engine = MemoryEngine(Path(tmp) / "m.sqlite", embedder=spec)
            engine.add_user("u")
            start = time.perf_counter()
            for i, turns in enumerate(sessions):
                engine.add_session("u", turns, timestamp=float(i))
            elapsed = time.perf_counter() - start
            engine.close()
        print(f"embedder {spec or 'none':7s}: {n / elapsed:8.0f} sessions/s ({elapsed:.2f} s)")
        with tempfile.TemporaryDirectory() as tmp:
            engine = MemoryEngine(Path(tmp) / "m.sqlite", embedder=spec)
            engine.add_user("u")
            start = time.perf_counter()
            for at in range(0, n, 64):
                batch = [NewSession(t, timestamp=float(at + i)) for i, t in enumerate(sessions[at : at + 64])]
                engine.add_sessions("u", batch)
            batched = time.perf_counter() - start
            engine.close()
        print(f"  batches of 64 (add_sessions): {n / batched:8.0f} sessions/s ({batched:.2f} s)")


def build_store(path: Path, size: int, per_user: int | None, dim: int, name: str) -> list[tuple[str, str]]:
    """Fill a store quickly (one transaction per session, as in production); return queries by user."""
    rng = random.Random(size)
    vec_rng = np.random.default_rng(size)
    store = MemoryStore(path)
    users = 1 if per_user is None else max(1, size // per_user)
    for u in range(users):
        store.add_user(f"user{u}")
    queries: list[tuple[str, str]] = []
    for i in range(size):
        user = f"user{0 if per_user is None else i % users}"
        turns, query = make_session(rng)
        vector = vec_rng.standard_normal(dim).astype(np.float32)
        vector /= np.linalg.norm(vector)
        store.add_session(user, turns, timestamp=float(i), vectors={name: vector})
        if len(queries) < 1000 and rng.random() < 0.05:
            queries.append((user, query))
    store.close()
    return queries


def latency(sizes: list[int], n_queries: int) -> None:
    embedder = load_embedder("minilm")
    embedder.encode(["warm up"])
    print("\n## Retrieval latency (BM25 + dense + exact names, fused; MiniLM query encoding included)")
    print(
        "| layout | sessions in store | sessions searched | index build s | p50 ms | p99 ms "
        "| search-only p50 ms | search-only p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    p50s: dict[str, list[float]] = {}
    for layout, per_user in (("one-user", None), ("many-users", 100)):
        for size in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "m.sqlite"
                queries = build_store(path, size, per_user, embedder.dim, embedder.name)
                engine = MemoryEngine(path, embedder=embedder)
                rng = random.Random(1)
                chosen = [rng.choice(queries) for _ in range(n_queries)]
                users = sorted({u for u, _ in chosen})
                start = time.perf_counter()
                for user in users:  # build (load + index) once per user, outside the query timing
                    engine.retrieve(user, "warm up")
                build = time.perf_counter() - start
                times, search = [], []
                for user, query in chosen:
                    t0 = time.perf_counter()
                    engine.retrieve(user, query)
                    times.append((time.perf_counter() - t0) * 1000)
                vectors = embedder.encode([q for _, q in chosen])
                for (user, query), vector in zip(chosen, vectors, strict=True):
                    t0 = time.perf_counter()
                    engine.retrieve(user, query, query_vector=vector)
                    search.append((time.perf_counter() - t0) * 1000)
                engine.close()
            searched = size if per_user is None else per_user
            p50, p99 = statistics.median(times), percentile(times, 99)
            s50, s99 = statistics.median(search), percentile(search, 99)
            p50s.setdefault(f"{layout} (with query encoding)", []).append(p50)
            p50s.setdefault(f"{layout} (search only)", []).append(s50)
            print(
                f"| {layout} | {size} | {searched} | {build:.2f} | {p50:.2f} | {p99:.2f} "
                f"| {s50:.2f} | {s99:.2f} |"
            )
    print()
    for layout, values in p50s.items():
        print(
            f"{layout}: p50 growth {sizes[0]} -> {sizes[-1]} sessions: x{values[-1] / values[0]:.2f}; "
            f"p50 at {sizes[-1]}: {values[-1]:.2f} ms (target <= 5 ms)"
        )
    import os

    print(f"load average during the run: {os.getloadavg()}")
    # The share of the latency that is the query embedding, for reading the numbers above.
    t = []
    for user_query in [q for _, q in chosen[:50]]:
        t0 = time.perf_counter()
        embedder.encode([user_query])
        t.append((time.perf_counter() - t0) * 1000)
    print(f"MiniLM query encoding alone: p50 {statistics.median(t):.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ingest", type=int, default=1000, help="sessions for the ingestion measurement")
    args = parser.parse_args()
    ingestion(args.ingest)
    latency(sorted(args.sizes), args.queries)


if __name__ == "__main__":
    main()

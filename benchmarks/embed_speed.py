"""CPU time to encode one short query, side by side: MiniLM (int8 ONNX) before (single queries on the
multi-threaded session), MiniLM now (single queries on a one-thread session), and the static embedder
distilled from it (``--embedder static``; needs the ``static`` extra).

    PYTHONPATH=src python benchmarks/embed_speed.py [--queries 300]

Prints CPU ms per query (process time, all threads), wall ms, the CPU ratio to "before", and the max
abs difference between the two MiniLM paths' embeddings (must be < 1e-5).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

import numpy as np

from personalign.retrieval import Embedder, MiniLMOnnxEmbedder, load_embedder

QUERIES = [
    "I am planning a trip to Japan next month, any tips on where to eat?",
    "what should I cook tonight",
    "Recommend a book about the history of science for my teenage son who likes physics",
    "Can you help me write an email to my landlord about the broken heater?",
    "best way to train for a half marathon in eight weeks",
    "which laptop should I buy for photo editing on a budget",
]


def per_query(embedder: Embedder, queries: Sequence[str]) -> tuple[float, float]:
    """(CPU ms, wall ms) per single-query ``encode`` call, after a short warm-up."""
    for q in queries[:10]:
        embedder.encode([q])
    cpu, wall = time.process_time(), time.perf_counter()
    for q in queries:
        embedder.encode([q])
    n = len(queries)
    return (time.process_time() - cpu) / n * 1e3, (time.perf_counter() - wall) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=300)
    ns = parser.parse_args()
    queries = [QUERIES[i % len(QUERIES)] + f" ({i})" for i in range(ns.queries)]
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, {ns.queries} queries")

    before = MiniLMOnnxEmbedder()
    before._query_session = before._session  # single queries on the multi-threaded session, as before
    now = MiniLMOnnxEmbedder()
    diff = max(float(np.abs(before.encode([q]) - now.encode([q])).max()) for q in queries[:50])
    rows: list[tuple[str, Embedder]] = [("minilm, before", before), ("minilm, now", now)]
    try:
        rows.append(("static (model2vec)", load_embedder("static")))
    except Exception as exc:  # the extra is optional; say why it is skipped
        print(f"static embedder skipped: {exc}")

    base_cpu = None
    print(f"{'embedder':<22}{'CPU ms/query':>14}{'wall ms/query':>15}{'CPU ratio':>11}")
    for label, embedder in rows:
        cpu, wall = per_query(embedder, queries)
        base_cpu = base_cpu or cpu
        print(f"{label:<22}{cpu:>14.3f}{wall:>15.3f}{base_cpu / cpu:>10.1f}x")
    print(f"max abs diff, MiniLM now vs before embeddings: {diff:.2e}")


if __name__ == "__main__":
    main()

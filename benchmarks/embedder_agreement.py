"""How closely the fast embedders follow MiniLM, and what one query costs each of them.

    PYTHONPATH=src python benchmarks/embedder_agreement.py [--embedders minilm-q8 static] [--runs 200]

1. Agreement on every session and turn the repository's fixtures hold (CUPID, HiCUPID, PrefEval,
   BenchPreS; packaged fixtures and their hand-written sources, deduplicated): the corpus is every
   session (its turns joined) and every single turn; the queries are the user turns, the requests
   and the questions. For each query, MiniLM's own top 10 of the corpus (the query's own text left
   out) is compared with each embedder's top 10: recall@10 (the share of MiniLM's ten found), and
   top-1 agreement. For embedders in MiniLM's space (same dimension), the mean and minimum cosine
   of a text's two vectors too.
2. Latency of one query, encoded as the gateway does (``encode_queries``: MiniLM's one-thread
   session), for a real user text of ~24 and one of ~60 tokens: p50 and p90 of ``--runs`` timed
   calls after a warm-up, wall and CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.retrieval import Embedder, load_embedder

ROOT = Path(__file__).resolve().parent.parent
TOP = 10


def _package_file(package: str, name: str) -> str:
    return (resources.files(package) / "fixtures" / name).read_text(encoding="utf-8")


def gather() -> tuple[list[str], list[str]]:
    """(corpus, queries): sessions and turns, and user texts, from every fixture in the repository."""
    sessions: list[list[tuple[str, str]]] = []  # each a list of (role, text)
    queries: list[str] = []
    for item in load_cupid("fixture").instances:
        queries.append(item.current_request)
        sessions += [[(m.role, m.content) for m in s.dialogue] for s in item.prior_interactions]
    journeys = json.loads((ROOT / "fixtures_src" / "cupid_journeys.json").read_text(encoding="utf-8"))
    for journey in journeys:
        sessions += [[(t["role"], t["content"]) for t in s["dialogue"]] for s in journey["sessions"]]
    hicupid = load_hicupid("fixture")
    for history in hicupid.histories.values():
        sessions += [[(m.role, m.content) for m in d.messages()] for d in history.dialogues]
    queries += [q.question for q in hicupid.qa]
    prefeval = json.loads(_package_file("personalign.benchmarks.prefeval", "prefeval_sample.json"))
    for name, rows in prefeval.items():
        for row in rows:
            queries += [row[k] for k in ("question", "implicit_query") if k in row]
            sessions += list(_prefeval_sessions(name, row))
    profiles = json.loads((ROOT / "fixtures_src" / "benchpres_profiles.json").read_text(encoding="utf-8"))
    sessions += [[("user", fact)] for p in profiles["profiles"] for fact in p.get("facts", [])]
    turns = [text for session in sessions for _, text in session]
    queries += [text for session in sessions for role, text in session if role == "user"]
    corpus = _unique(["\n".join(text for _, text in s) for s in sessions] + turns)
    return corpus, _unique(queries)


def _prefeval_sessions(name: str, row: dict[str, Any]) -> Iterator[list[tuple[str, str]]]:
    conversation = row.get("conversation")
    if name == "filtered_inter_turns.json":
        yield [(t["role"], t["content"]) for t in conversation or []]
    elif isinstance(conversation, dict) and "query" in conversation:
        yield [
            ("user", conversation["query"]),
            ("assistant", conversation["assistant_options"]),
            ("user", conversation["user_selection"]),
            ("assistant", conversation["assistant_acknowledgment"]),
        ]
    elif isinstance(conversation, dict):
        yield [(role, turn[role]) for turn in conversation.values() for role in ("user", "assistant")]
    if "preference" in row:
        yield [("user", row["preference"])]


def _unique(texts: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))


def top_ten(query_vectors: np.ndarray, corpus_vectors: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Each query's 10 best corpus positions (best first), its own text (``own[i]``, -1: none) left out."""
    scores = query_vectors @ corpus_vectors.T
    rows = np.flatnonzero(own >= 0)
    scores[rows, own[rows]] = -np.inf
    best = np.argpartition(-scores, TOP, axis=1)[:, :TOP]
    order = np.argsort(-np.take_along_axis(scores, best, axis=1), axis=1)
    return np.take_along_axis(best, order, axis=1)


def latency(embedder: Embedder, text: str, runs: int) -> tuple[float, float, float]:
    """(p50 wall ms, p90 wall ms, mean CPU ms) of one query, after a warm-up."""
    encode_queries = getattr(embedder, "encode_queries", embedder.encode)  # as the gateway's batcher
    for _ in range(20):
        encode_queries([text])
    walls: list[float] = []
    cpu = time.process_time()
    for _ in range(runs):
        start = time.perf_counter()
        encode_queries([text])
        walls.append((time.perf_counter() - start) * 1e3)
    cpu_ms = (time.process_time() - cpu) / runs * 1e3
    deciles = statistics.quantiles(walls, n=10)
    return statistics.median(walls), deciles[8], cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--embedders", nargs="+", default=["minilm-q8", "static"])
    parser.add_argument("--runs", type=int, default=200)
    ns = parser.parse_args()
    corpus, queries = gather()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print(f"corpus {len(corpus)} texts (sessions and turns), {len(queries)} queries")
    position = {text: i for i, text in enumerate(corpus)}
    own = np.array([position.get(q, -1) for q in queries])
    embedders = {"minilm": load_embedder("minilm"), **{spec: load_embedder(spec) for spec in ns.embedders}}
    vectors = {spec: (e.encode(corpus), e.encode(queries)) for spec, e in embedders.items()}
    reference = top_ten(vectors["minilm"][1], vectors["minilm"][0], own)

    print(f"\n| embedder | recall@{TOP} of MiniLM's top {TOP} | top-1 agreement | mean cosine | min cosine |")
    print("|---|---|---|---|---|")
    for spec in ns.embedders:
        corpus_vectors, query_vectors = vectors[spec]
        ranked = top_ten(query_vectors, corpus_vectors, own)
        recall = np.mean([len(set(a) & set(b)) / TOP for a, b in zip(reference, ranked, strict=True)])
        top1 = float(np.mean(reference[:, 0] == ranked[:, 0]))
        cosine = "n/a (another space)", "n/a"
        if corpus_vectors.shape[1] == vectors["minilm"][0].shape[1]:
            both = np.concatenate(
                [
                    (corpus_vectors * vectors["minilm"][0]).sum(1),
                    (query_vectors * vectors["minilm"][1]).sum(1),
                ]
            )
            cosine = f"{both.mean():.4f}", f"{both.min():.4f}"
        print(f"| {spec} | {recall:.3f} | {top1:.3f} | {cosine[0]} | {cosine[1]} |")

    tokenizer = embedders["minilm"].tokenizer  # type: ignore[attr-defined]
    lengths = {q: len(tokenizer.encode(q).ids) for q in queries}
    samples = {n: min(queries, key=lambda q: (abs(lengths[q] - n), q)) for n in (24, 60)}
    print(f"\nOne query, {ns.runs} runs after 20 warm-up (MiniLM: the one-thread session)")
    print("| embedder | tokens | p50 wall ms | p90 wall ms | CPU ms / query |")
    print("|---|---|---|---|---|")
    for spec, embedder in embedders.items():
        for text in samples.values():
            p50, p90, cpu = latency(embedder, text, ns.runs)
            print(f"| {spec} | {lengths[text]} | {p50:.2f} | {p90:.2f} | {cpu:.2f} |")


if __name__ == "__main__":
    main()

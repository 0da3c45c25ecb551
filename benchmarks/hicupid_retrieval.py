"""HiCUPID retrieval speed at the paper's scale, measured side by side.

    .venv/bin/python benchmarks/hicupid_retrieval.py [--users 1500] [--dense-texts 2000]

Generates synthetic histories shaped like HiCUPID's (per user: 25 persona dialogues of 10 rounds,
5 profile and 10 schedule dialogues of 1 round, ~17K tokens; Zipf-distributed words) and 40
questions per user, then prints:

1. utterance-level BM25 (index each user's user turns, run that user's 40 queries, top 25) with
   `bm25s` (personalign's `BM25Index`) and with `rank_bm25.BM25Okapi`, both on the same tokens:
   queries per second for each and the ratio;
2. dense-retrieval encode throughput on CPU of the default offline embedder (MiniLM int8 ONNX), and
   how much faster the embedding cache returns the same vectors on a later run;
3. the whole-history prompt size against retrieved-context prompt sizes, as ratios (tokens of the
   MiniLM WordPiece tokenizer, a stand-in for the subject's).

Text generation is not timed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from personalign.benchmarks.hicupid.context import dialogue_units, utterance_units  # noqa: E402
from personalign.benchmarks.hicupid.schema import HiCupidDialogue, HiCupidHistory, HiCupidTurn  # noqa: E402
from personalign.retrieval import (  # noqa: E402
    BM25Index,
    CachedEmbedder,
    EmbeddingCache,
    load_embedder,
    tokenize,
)


def _english_words() -> list[str]:
    """Whole English words from the bundled MiniLM vocabulary, roughly in frequency order."""
    from importlib import resources

    text = (resources.files("personalign.retrieval") / "data" / "minilm-tokenizer.json").read_text("utf-8")
    vocab: dict[str, int] = json.loads(text)["model"]["vocab"]
    words = sorted((i, w) for w, i in vocab.items() if w.isascii() and w.isalpha() and len(w) > 1)
    return [w for _, w in words]


class TextSource:
    """Zipf-distributed English words (deterministic per seed), about one token per word."""

    words = _english_words()

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def sentence(self, n: int) -> str:
        ranks = np.minimum(self.rng.zipf(1.3, size=n), len(self.words)) - 1
        return " ".join(self.words[r] for r in ranks)


def make_history(user_id: int, text: TextSource) -> tuple[HiCupidHistory, list[str]]:
    """40 dialogues (25 persona x 10 rounds, 15 single-round) and 40 queries drawn from them."""
    dialogues = []
    queries = []
    for k in range(40):
        rounds = 10 if k < 25 else 1
        turns = tuple(HiCupidTurn(user=text.sentence(22), assistant=text.sentence(38)) for _ in range(rounds))
        kind = "persona" if k < 25 else ("profile" if k < 30 else "schedule")
        dialogues.append(
            HiCupidDialogue(user_id=user_id, dialogue_id=40 * user_id + k, type=kind, turns=turns)
        )  # type: ignore[arg-type]
        source = turns[int(text.rng.integers(len(turns)))].user.split()
        picked = text.rng.choice(source, size=min(4, len(source)), replace=False)
        queries.append(" ".join([*picked, text.sentence(6)]))
    return HiCupidHistory(user_id=user_id, dialogues=tuple(dialogues)), queries


def bench_bm25(users: int, k: int) -> None:
    from rank_bm25 import BM25Okapi

    text = TextSource(seed=1)
    t_bm25s = t_rank = 0.0
    i_bm25s = i_rank = 0.0
    n_queries = n_units = 0
    agree = 0
    for user_id in range(users):
        history, queries = make_history(user_id, text)
        units = [u.text for u in utterance_units(history)]
        n_units += len(units)
        n_queries += len(queries)

        start = time.perf_counter()
        index = BM25Index(units)
        i_bm25s += time.perf_counter() - start
        top_bm25s = [[h.index for h in index.search(q, k)] for q in queries]
        t_bm25s += time.perf_counter() - start

        start = time.perf_counter()
        okapi = BM25Okapi([tokenize(u) or [""] for u in units])
        i_rank += time.perf_counter() - start
        top_rank = []
        for q in queries:
            scores = okapi.get_scores(tokenize(q))
            top_rank.append([int(i) for i in np.argsort(-scores, kind="stable")[:k]])
        t_rank += time.perf_counter() - start
        agree += sum(a[:1] == b[:1] for a, b in zip(top_bm25s, top_rank, strict=True))
        if users >= 10 and (user_id + 1) % max(1, users // 10) == 0:
            print(f"  ... {user_id + 1}/{users} users", file=sys.stderr)
    print(
        f"utterance-level BM25: {users} users x 40 dialogues, {n_units:,} indexed user turns, "
        f"{n_queries:,} queries"
    )
    print(f"  bm25s     (index + query): {t_bm25s:8.2f} s  -> {n_queries / t_bm25s:10.0f} queries/s")
    print(f"  rank_bm25 (index + query): {t_rank:8.2f} s  -> {n_queries / t_rank:10.0f} queries/s")
    print(f"  ratio bm25s / rank_bm25 queries per second: {t_rank / t_bm25s:.2f}x")
    q_bm25s, q_rank = t_bm25s - i_bm25s, t_rank - i_rank
    print(
        f"  indexing only: bm25s {i_bm25s:.2f} s, rank_bm25 {i_rank:.2f} s -> ratio {i_rank / i_bm25s:.2f}x"
    )
    print(
        f"  querying only: bm25s {n_queries / q_bm25s:.0f} q/s, rank_bm25 {n_queries / q_rank:.0f} q/s "
        f"-> ratio {q_rank / q_bm25s:.2f}x"
    )
    print(
        f"  same top-1 unit in both: {100 * agree / n_queries:.1f}% of queries "
        "(the two BM25 variants' idf differs slightly)"
    )


def bench_dense(n_texts: int) -> None:
    text = TextSource(seed=2)
    texts = [text.sentence(22) for _ in range(n_texts)]
    embedder = load_embedder("minilm")
    embedder.encode(texts[:16])  # warm up
    start = time.perf_counter()
    embedder.encode(texts)
    elapsed = time.perf_counter() - start
    per_user = 25 * 10 + 15
    print(
        f"dense encode ({embedder.name}, CPU): {n_texts} user turns in {elapsed:.2f} s "
        f"-> {n_texts / elapsed:.0f} texts/s"
    )
    print(f"  one user's history ({per_user} user turns): {per_user / (n_texts / elapsed):.2f} s; "
          f"1,500 users: {1500 * per_user / (n_texts / elapsed) / 60:.1f} min")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        cached = CachedEmbedder(embedder, EmbeddingCache(Path(tmp) / "vectors.sqlite"))
        cached.encode(texts)  # fills the cache (encodes every text)
        start = time.perf_counter()
        cached.encode(texts)
        reread = time.perf_counter() - start
        cached.cache.close()
    print(
        f"  embedding cache: the same {n_texts} texts read back in {reread:.3f} s -> "
        f"{n_texts / reread:.0f} texts/s, {elapsed / reread:.0f}x faster than encoding"
    )


def bench_prompt_size(users: int) -> None:
    from importlib import resources

    from tokenizers import Tokenizer

    tok_file = resources.files("personalign.retrieval") / "data" / "minilm-tokenizer.json"
    tokenizer = Tokenizer.from_str(tok_file.read_text(encoding="utf-8"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def tokens(texts: list[str]) -> int:
        return sum(len(e.ids) - 2 for e in tokenizer.encode_batch(texts)) if texts else 0

    text = TextSource(seed=3)
    whole: list[int] = []
    retrieved: dict[str, list[int]] = {}
    for user_id in range(users):
        history, queries = make_history(user_id, text)
        all_texts = [m.content for d in history.dialogues for m in d.messages()]
        whole.append(tokens(all_texts))
        for unit, ks, units in (
            ("utterance", (5, 15, 25), utterance_units(history)),
            ("dialogue", (1, 3, 5), dialogue_units(history)),
        ):
            index = BM25Index([u.text for u in units])
            for k in ks:
                sizes = [
                    tokens([m.content for h in index.search(q, k) for m in units[h.index].messages])
                    for q in queries[:5]
                ]
                retrieved.setdefault(f"bm25-{unit}-{k}", []).extend(sizes)
    mean_whole = float(np.mean(whole))
    print(
        f"prompt size (history tokens, {users} generated users): whole history "
        f"{mean_whole:,.0f} tokens per user"
    )
    for name, sizes in retrieved.items():
        mean = float(np.mean(sizes))
        print(f"  {name:22s} {mean:8,.0f} tokens  -> whole / retrieved = {mean_whole / mean:5.1f}x")


def bench_okapi(users: int, k: int) -> None:
    """The paper's BM25 (whitespace tokens, always k): OkapiBM25Index against rank_bm25 itself."""
    from rank_bm25 import BM25Okapi

    from personalign.retrieval.okapi import OkapiBM25Index

    text = TextSource(seed=2)
    i_ours = i_rank = q_ours = q_rank = 0.0
    n_queries = same = 0
    for user_id in range(users):
        history, queries = make_history(user_id, text)
        units = [u.text for u in utterance_units(history)]
        n_queries += len(queries)
        start = time.perf_counter()
        index = OkapiBM25Index(units)
        mid = time.perf_counter()
        ours = [[h.index for h in index.search(q, k)] for q in queries]
        end = time.perf_counter()
        i_ours, q_ours = i_ours + mid - start, q_ours + end - mid
        start = time.perf_counter()
        okapi = BM25Okapi([u.split() for u in units])
        mid = time.perf_counter()
        theirs = []
        for q in queries:
            scores = okapi.get_scores(q.split())
            theirs.append(sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)[:k])
        end = time.perf_counter()
        i_rank, q_rank = i_rank + mid - start, q_rank + end - mid
        same += sum(a == b for a, b in zip(ours, theirs, strict=True))
    t_ours, t_rank = i_ours + q_ours, i_rank + q_rank
    print(f"Okapi BM25 (official tokens, top {k}): {users} users, {n_queries:,} queries")
    print(f"  OkapiBM25Index (index + query): {t_ours:6.2f} s -> {n_queries / t_ours:8.0f} queries/s")
    print(f"  rank_bm25      (index + query): {t_rank:6.2f} s -> {n_queries / t_rank:8.0f} queries/s")
    ratios = f"indexing {i_rank / i_ours:.2f}x, querying {q_rank / q_ours:.2f}x"
    print(f"  ratio: {t_rank / t_ours:.2f}x overall, {ratios}")
    print(f"  identical top-{k} lists: {same}/{n_queries}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1500, help="users for the BM25 comparison")
    parser.add_argument("--dense-texts", type=int, default=2000, help="texts for the encode throughput")
    parser.add_argument("--prompt-users", type=int, default=20, help="users for the prompt-size ratio")
    parser.add_argument("--k", type=int, default=25, help="top-k of each BM25 query")
    parser.add_argument("--okapi-users", type=int, default=300, help="users for the Okapi comparison")
    parser.add_argument("--only-okapi", action="store_true", help="run only the Okapi comparison")
    args = parser.parse_args()
    bench_okapi(args.okapi_users, args.k)
    if args.only_okapi:
        return
    bench_bm25(args.users, args.k)
    bench_dense(args.dense_texts)
    bench_prompt_size(args.prompt_users)


if __name__ == "__main__":
    main()

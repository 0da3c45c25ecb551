"""The static embedder distilled from MiniLM, and MiniLM's one-thread path for single queries."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from personalign.errors import ConfigError
from personalign.retrieval import MiniLMOnnxEmbedder, load_embedder
from personalign.retrieval.static import StaticEmbedder, post_process, token_table

TEXTS = ["I love hiking in the mountains", "my favourite food is sushi", "which trail this weekend?"]


@pytest.fixture(scope="module")
def minilm() -> MiniLMOnnxEmbedder:
    return MiniLMOnnxEmbedder(threads=2)


def test_single_query_runs_on_a_one_thread_session_with_the_same_embedding(
    minilm: MiniLMOnnxEmbedder,
) -> None:
    batch = minilm.encode(TEXTS)
    singles = np.concatenate([minilm.encode([t]) for t in TEXTS])
    assert np.abs(batch - singles).max() < 1e-5
    assert minilm._session_for(1).get_session_options().intra_op_num_threads == 1
    assert minilm._session_for(len(TEXTS)).get_session_options().intra_op_num_threads == 2


def test_query_batches_run_on_the_one_thread_session_with_the_same_embeddings(
    minilm: MiniLMOnnxEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from personalign.retrieval.batching import QueryBatcher

    expected = minilm.encode(TEXTS)
    used: list[int] = []
    session_for = minilm._session_for
    monkeypatch.setattr(minilm, "_session_for", lambda rows: used.append(rows) or session_for(rows))
    assert np.abs(minilm.encode_queries(TEXTS) - expected).max() < 1e-5
    assert used == [1]  # a batch of queries on the one-thread session
    batcher = QueryBatcher(minilm)
    assert batcher._encode_queries == minilm.encode_queries
    assert np.abs(batcher.encode_one(TEXTS[0]) - expected[0]).max() < 1e-5


def test_pool_ids_of_one_token_matches_encoding_that_word(minilm: MiniLMOnnxEmbedder) -> None:
    tok = minilm.tokenizer
    word_id = tok.token_to_id("mountain")
    row = minilm.pool_ids(np.array([[tok.token_to_id("[CLS]"), word_id, tok.token_to_id("[SEP]")]]))
    row /= np.linalg.norm(row, axis=1, keepdims=True)
    assert np.abs(row - minilm.encode(["mountain"])).max() < 1e-5


def test_token_table_pools_cls_token_sep_for_every_id_in_order() -> None:
    seen: list[npt.NDArray[np.int64]] = []

    def pool(ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        seen.append(ids)
        return ids[:, 1:2].astype(np.float32)

    table = token_table(pool, 1100, cls=101, sep=102)
    assert table[:, 0].tolist() == list(range(1100))
    rows = np.concatenate(seen)
    assert (rows[:, 0] == 101).all() and (rows[:, 2] == 102).all()


def test_post_process_reduces_to_the_top_components_and_down_weights_frequent_tokens() -> None:
    rng = np.random.default_rng(0)
    raw = (rng.normal(size=(500, 8)) * np.array([9, 5, 3, 1, 0.1, 0.1, 0.1, 0.1])).astype(np.float32)
    out = post_process(raw, 3, sif_coefficient=None)
    assert out.shape == (500, 3)
    variances = out.var(axis=0)
    assert variances[0] > variances[1] > variances[2] > 0.5
    ratio = post_process(raw, 3)[:, 0] / out[:, 0]
    assert (np.diff(ratio) > 0).all() and ratio[-1] <= 1.0  # lower ids (more frequent) weigh less


def test_missing_model2vec_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "model2vec", None)
    with pytest.raises(ConfigError, match=r"personalign\[static\]"):
        load_embedder("static")


class FakeTeacher:
    """The MiniLM tokenizer with a cheap random token table in place of the transformer."""

    name = "fake@0123456789abcdef"

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self.calls = 0

    def pool_ids(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        self.calls += 1
        return np.stack([np.random.default_rng(int(i)).normal(size=16) for i in ids[:, 1]]).astype(np.float32)


def test_distils_once_into_the_cache_dir_then_loads(tmp_path: Path, minilm: MiniLMOnnxEmbedder) -> None:
    pytest.importorskip("model2vec")
    teacher = FakeTeacher(minilm.tokenizer)
    first = StaticEmbedder.load_or_distill(
        tmp_path, dims=8, teacher=lambda: teacher, teacher_name=teacher.name
    )
    assert teacher.calls > 0 and first.dim == 8
    assert next(iter(tmp_path.iterdir())).name == "fake-0123456789abcdef-d8"
    vectors = first.encode(TEXTS)
    assert vectors.shape == (3, 8) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    calls = teacher.calls
    again = StaticEmbedder.load_or_distill(
        tmp_path, dims=8, teacher=lambda: teacher, teacher_name=teacher.name
    )
    assert teacher.calls == calls
    assert np.abs(again.encode(TEXTS) - vectors).max() < 1e-6
    assert first.encode([]).shape == (0, 8)

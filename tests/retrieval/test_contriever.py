"""The Contriever embedder on a tiny random BERT (no download): official mean pooling, raw dot product."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from personalign.retrieval import ContrieverEmbedder, DenseIndex, load_embedder

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WORDS = [
    "i",
    "like",
    "rock",
    "climbing",
    "at",
    "the",
    "gym",
    "on",
    "weekends",
    "my",
    "sister",
    "hates",
    "cilantro",
    "and",
    "loves",
    "jazz",
    "music",
]


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"), model_max_length=32)
    tokenizer.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(path)
    return path


def direct_embedding(path: Path, text: str) -> np.ndarray:
    """One text alone (no padding): the mean of its token states."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModel.from_pretrained(path).eval()
    inputs = tokenizer([text], truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**inputs).last_hidden_state[0]
    return hidden.mean(dim=0).numpy()


def test_mean_pooling_over_the_attention_mask_matches_each_text_alone(tiny_bert: Path) -> None:
    texts = ["i like rock climbing", "my sister hates cilantro and loves jazz music at the gym", "jazz"]
    embedder = ContrieverEmbedder(str(tiny_bert), batch_size=2)  # padded batches of mixed lengths
    rows = embedder.encode(texts)
    assert rows.shape == (3, 16) and rows.dtype == np.float32
    for row, text in zip(rows, texts, strict=True):
        np.testing.assert_allclose(row, direct_embedding(tiny_bert, text), rtol=1e-4, atol=1e-5)


def test_scores_are_raw_dot_products_not_cosines(tiny_bert: Path) -> None:
    embedder = load_embedder(f"contriever:{tiny_bert}")
    assert isinstance(embedder, ContrieverEmbedder) and embedder.name == f"contriever:{tiny_bert}"
    texts = ["i like rock climbing", "my sister hates cilantro", "loves jazz music on weekends"]
    index = DenseIndex(embedder, texts)
    query = direct_embedding(tiny_bert, "jazz music")
    norms = np.linalg.norm(index.vectors, axis=1)
    assert not np.allclose(norms, 1.0)  # Contriever rows are not normalised
    expected = np.array([direct_embedding(tiny_bert, t) @ query for t in texts])
    np.testing.assert_allclose(index.scores("jazz music"), expected, rtol=1e-4, atol=1e-5)
    assert [h.index for h in index.search("jazz music", 3)] == list(np.argsort(-expected, kind="stable"))


def test_a_missing_model_is_a_clear_config_error(tmp_path: Path) -> None:
    from personalign.errors import ConfigError

    with pytest.raises(ConfigError, match="contriever"):
        ContrieverEmbedder(str(tmp_path / "no-such-model"))


def test_cli_start_up_does_not_import_torch() -> None:
    code = (
        "import sys, personalign.cli, personalign.benchmarks.hicupid.context; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

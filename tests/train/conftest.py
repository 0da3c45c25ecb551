"""A tiny random Llama with a byte-level BPE tokenizer and a chat template of our own (no download)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personalign.benchmarks.hicupid.data import load_hicupid

TEMPLATE = (
    "{% for m in messages %}<|s|>{{ m['role'] }}\n{{ m['content'] }}<|e|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|s|>assistant\n{% endif %}"
)
SPECIALS = ["<|e|>", "<|s|>", "<|pad|>"]  # <|e|> is id 0: the end-of-turn and EOS


def _corpus() -> list[str]:
    data = load_hicupid("fixture")
    texts = [t for q in data.qa for t in (q.question, q.personalized_answer, q.general_answer)]
    texts += [
        turn.user + " " + turn.assistant
        for h in data.histories.values()
        for d in h.dialogues
        for turn in d.turns
    ]
    return texts


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    path = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _corpus(),
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|e|>", pad_token="<|pad|>", bos_token="<|s|>"
    )
    fast.chat_template = TEMPLATE
    fast.save_pretrained(path)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=0,
        bos_token_id=1,
        pad_token_id=2,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    (path / "NOTE.json").write_text(json.dumps({"made_by": "tests/train/conftest.py"}))
    return path

"""A tiny word-level tokenizer with a BOS-adding chat template, for collator tests without torch."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

BOS = "<s>"
EOT = "</t>"
EOS = "</s>"
_TOKEN = re.compile(r"<s>|</t>|</s>|\[[a-z]+\]|\w+|[^\w\s]|\s+")


class FakeTokenizer:
    """Template: BOS, then ``[role]content</t>`` per message; the generation prompt is ``[assistant]``.

    Like Llama 3, the template adds BOS itself and ends each turn with an end-of-turn token that is
    not EOS, so tokenizing prompt and answer apart would put a BOS inside the answer.
    """

    bos_token = BOS
    eos_token = EOS

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {BOS: 0, EOT: 1, EOS: 2}

    def id(self, piece: str) -> int:
        return self.vocab.setdefault(piece, len(self.vocab))

    @property
    def bos_token_id(self) -> int:
        return self.vocab[BOS]

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> str:
        text = BOS + "".join(f"[{m['role']}]{m['content']}{EOT}" for m in conversation)
        if kwargs.get("add_generation_prompt"):
            text += "[assistant]"
        return text

    def __call__(self, text: str, **kwargs: Any) -> Mapping[str, Any]:
        pieces = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
        ids = [self.id(p) for p, _, _ in pieces]
        if kwargs.get("add_special_tokens", True):
            ids = [self.bos_token_id, *ids]  # what a naive second tokenization adds
            offsets = [(0, 0)] + [(s, e) for _, s, e in pieces]
        else:
            offsets = [(s, e) for _, s, e in pieces]
        out: dict[str, Any] = {"input_ids": ids}
        if kwargs.get("return_offsets_mapping"):
            out["offset_mapping"] = offsets
        return out

    def decode(self, ids: list[int]) -> str:
        inverse = {v: k for k, v in self.vocab.items()}
        return "".join(inverse[i] for i in ids)

"""Greedy decoding under a JSON-schema grammar, checked one token at a time.

llama-cpp-python samples a schema-constrained reply with the chain penalties -> grammar -> greedy,
so every generated token runs the grammar over the whole vocabulary (49,152 tokens for SmolLM2):
measured on one core, 21-25 ms per token against 14-15 ms without the grammar. For greedy
decoding the whole-vocabulary pass is rarely needed. The unconstrained argmax is taken first and
only that token is checked against the grammar; if the grammar accepts it, it is also the argmax
over the tokens the grammar allows, so the reply is the same. Only when it is rejected are the
logits masked by the grammar over the whole vocabulary, as before (llama.cpp's own `common`
sampler does the same check-first step).

The fast path applies only where it gives the very same tokens: temperature 0, a grammar, neutral
penalties and no logits processor (llama-cpp-python turns `logit_bias` into one). Everything else
goes through llama-cpp-python's own chain. `PERSONALIGN_LLAMA_GRAMMAR_CHECK_FIRST=0` turns it off.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

# llama.cpp's `llama_token_data` as numpy sees it (one token's id, logit and probability).
TOKEN_DATA = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)


def check_first_enabled() -> bool:
    return os.environ.get("PERSONALIGN_LLAMA_GRAMMAR_CHECK_FIRST", "1") != "0"


@dataclass
class GrammarStats:
    """Tokens sampled under a grammar: how many needed the whole-vocabulary pass."""

    tokens: int = 0
    full_passes: int = 0


def first_max(logits: Any) -> int:
    """The index llama.cpp's greedy sampler picks: the first of the highest logits."""
    return int(np.argmax(logits))


class CheckFirstGreedySampler:
    """Stands in for llama-cpp-python's sampler chain (`sample(ctx, idx)`, `close()`) for greedy
    decoding under a grammar; see the module docstring."""

    def __init__(self, llama_cpp: Any, vocab: Any, n_vocab: int, grammar: Any, stats: GrammarStats) -> None:
        self._lib = llama_cpp
        self._n_vocab = n_vocab
        self._stats = stats
        self._grammar = llama_cpp.llama_sampler_init_grammar(
            vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not self._grammar:
            raise ValueError("llama.cpp could not build the grammar sampler")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(data=self._one, size=1, selected=-1, sorted=False)
        self._all = (llama_cpp.llama_token_data * n_vocab)()
        self._all_array = llama_cpp.llama_token_data_array(
            data=self._all, size=n_vocab, selected=-1, sorted=False
        )
        self._all_view = np.ctypeslib.as_array(self._all).view(TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.intc)

    def _allows(self, token: int) -> bool:
        self._one[0].id = token
        self._one[0].logit = 0.0
        self._one[0].p = 0.0
        self._one_array.size = 1
        self._one_array.selected = -1
        self._lib.llama_sampler_apply(self._grammar, ctypes.byref(self._one_array))
        return bool(self._one[0].logit != float("-inf"))

    def _masked_argmax(self, logits: Any) -> int:
        view = self._all_view
        view["id"] = self._ids
        view["logit"] = logits
        view["p"] = 0.0
        self._all_array.size = self._n_vocab
        self._all_array.selected = -1
        self._all_array.sorted = False
        self._lib.llama_sampler_apply(self._grammar, ctypes.byref(self._all_array))
        masked = view["logit"]
        # The grammar only sets disallowed tokens to -inf; it neither reorders nor resizes here.
        return first_max(masked)

    def sample(self, ctx: Any, idx: int = -1) -> int:
        pointer = self._lib.llama_get_logits_ith(ctx.ctx, idx)
        logits = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        self._stats.tokens += 1
        token = first_max(logits)
        if not self._allows(token):
            self._stats.full_passes += 1
            token = self._masked_argmax(logits)
        self._lib.llama_sampler_accept(self._grammar, token)
        return token

    def close(self) -> None:
        if self._grammar:
            self._lib.llama_sampler_free(self._grammar)
            self._grammar = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone
            self.close()


def check_first_applies(
    *,
    grammar: Any,
    temp: float,
    repeat_penalty: float,
    frequency_penalty: float,
    presence_penalty: float,
    mirostat_mode: int,
    logits_processor: Any,
) -> bool:
    """Whether the check-first sampler gives exactly the tokens of llama-cpp-python's chain."""
    return (
        grammar is not None
        and temp == 0.0
        and repeat_penalty == 1.0
        and frequency_penalty == 0.0
        and presence_penalty == 0.0
        and mirostat_mode == 0
        and logits_processor is None
        and check_first_enabled()
    )


def fast_llama_class() -> type:
    """A `llama_cpp.Llama` whose greedy schema-constrained sampling checks the argmax first."""
    import llama_cpp
    from llama_cpp import Llama

    class CheckFirstLlama(Llama):  # type: ignore[misc]
        grammar_stats: GrammarStats

        def _init_sampler(self, **kwargs: Any) -> Any:  # type: ignore[override]
            if not hasattr(self, "grammar_stats"):
                self.grammar_stats = GrammarStats()
            applies = check_first_applies(
                grammar=kwargs.get("grammar"),
                temp=kwargs.get("temp", 0.8),
                repeat_penalty=kwargs.get("repeat_penalty", 1.0),
                frequency_penalty=kwargs.get("frequency_penalty", 0.0),
                presence_penalty=kwargs.get("presence_penalty", 0.0),
                mirostat_mode=kwargs.get("mirostat_mode", 0),
                logits_processor=kwargs.get("logits_processor"),
            )
            if not applies:
                return super()._init_sampler(**kwargs)
            return CheckFirstGreedySampler(
                llama_cpp, self._model.vocab, self._n_vocab, kwargs["grammar"], self.grammar_stats
            )

    return CheckFirstLlama

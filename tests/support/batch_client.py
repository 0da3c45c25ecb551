"""A batch run in its own process, for kill-and-resume tests:

    python -m tests.support.batch_client SPEC JOURNAL_DIR N OUT_JSON

submits N requests (``question i``) through the journal in JOURNAL_DIR, polls every 50 ms,
and writes ``{"texts": {custom_id: text}, "submitted": ..., "jobs": ...}`` to OUT_JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from personalign.llm import GenerateConfig, ModelFactory
from personalign.llm.batch import BatchJournal, BatchRunner, PollPolicy, batch_provider, batch_request
from personalign.types import Message


async def run(spec: str, journal_dir: str, n: int) -> dict[str, object]:
    factory = ModelFactory(cache=None)
    model = factory.get(spec)
    provider = batch_provider(model.spec)
    runner = BatchRunner(provider, BatchJournal(journal_dir, provider.name), poll=PollPolicy(0.05, 1.0, 0.05))
    requests = [
        batch_request(model, [Message(role="user", content=f"question {i}")], GenerateConfig())
        for i in range(n)
    ]
    try:
        outcome = await runner.run(requests)
    finally:
        await provider.aclose()
        await factory.aclose()
    texts = {cid: item.response.text for cid, item in outcome.items.items() if item.response is not None}
    return {"texts": texts, "submitted": outcome.submitted, "jobs": outcome.jobs, "missing": outcome.missing}


def main() -> None:
    spec, journal_dir, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    result = asyncio.run(run(spec, journal_dir, n))
    Path(out).write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()

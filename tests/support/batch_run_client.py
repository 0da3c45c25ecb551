"""A `--batch` benchmark run in its own process, for kill-and-resume tests:

    python -m tests.support.batch_run_client BENCHMARK MODEL_SPEC RUN_DIR CACHE LIMIT

runs BENCHMARK with MODEL_SPEC as subject and judge (`personalign.api.run(..., batch=True)`),
polling the batch jobs every 50 ms instead of from 5 s.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from personalign import api
from personalign.runs import lifecycle
from personalign.runs.batching import BatchSession


def main() -> None:
    name, model, run_dir, cache, limit = sys.argv[1:6]
    session = lifecycle._batch_session

    def fast(settings: lifecycle.RunSettings) -> BatchSession | None:
        return session(replace(settings, batch_poll=0.05))

    lifecycle._batch_session = fast
    api.run(name, model=model, judge=model, run_dir=run_dir, cache=cache, limit=int(limit), batch=True)


if __name__ == "__main__":
    main()

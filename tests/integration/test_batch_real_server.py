"""`--batch` with a real model: the fake batch endpoint runs its jobs on the real llama.cpp server
(as a provider runs a batch), and the CUPID run scores exactly as the direct run on that server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from personalign.benchmarks.cupid.run import RunSettings, run_cupid
from personalign.benchmarks.cupid.steps import CupidConfig
from personalign.runs.store import RunDir
from tests.support.batch_server import BatchServer
from tests.support.llama_server import llama_server, spec_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _scored(run_dir: Path) -> dict[str, Any]:
    return {
        iid: (r.status, {n: (s.status, s.raw, s.parsed, s.error) for n, s in r.steps.items()})
        for iid, r in RunDir(run_dir).records().items()
    }


def test_batch_run_through_a_real_model_scores_as_the_direct_run(tmp_path: Path) -> None:
    with llama_server() as base_url, BatchServer(delay=0, forward=base_url) as fake:

        def run(spec: str, tag: str, batch: bool) -> dict[str, Any]:
            config = CupidConfig(subject=spec, decomposer=spec, matcher=spec, judge=spec, task="inference")
            settings = RunSettings(
                run_dir=tmp_path / tag,
                limit=2,
                concurrency=2,
                cache_path=tmp_path / f"{tag}.sqlite",
                progress=False,
                batch=batch,
                batch_poll=0.2,
            )
            return run_cupid(config, settings).summary

        direct = run(spec_for(base_url), "direct", batch=False)
        batch = run(spec_for(fake.base_url), "batch", batch=True)
        creates = fake.stats.creates
    assert direct["status"] == batch["status"]
    assert batch["inference"] == direct["inference"]
    assert _scored(tmp_path / "batch") == _scored(tmp_path / "direct")
    assert batch["batch"]["jobs"] == len(creates) >= 2  # infer, then the judges that depend on it
    assert batch["usage"]["per_model"]["openai-compat/smollm2"]["batch_calls"] == sum(map(len, creates))

"""Real (tiny) training through TRL + PEFT: the loss falls, checkpoints resume, sft-dpo chains."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.errors import ConfigError
from personalign.llm import GenerateConfig, build_backend, parse_model_spec
from personalign.llm.adapters import CHAIN_FILE
from personalign.train.examples import build_examples
from personalign.train.settings import LoraSettings, TrainSettings
from personalign.train.trainer import MANIFEST, train_stage

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

LORA = LoraSettings(r=8, alpha=16, dropout=0.0)


def examples(n: int = 4) -> list:  # type: ignore[type-arg]
    return asyncio.run(build_examples(load_hicupid("fixture"), context="gold", limit=n))


def settings(kind: str, **kw: object) -> TrainSettings:
    values: dict[str, object] = {
        "kind": kind,
        "max_steps": 4,
        "max_length": 1024,
        "lora": LORA,
        "save_steps": 2,
        "gradient_checkpointing": False,
    }
    values.update(kw)
    return TrainSettings(**values)  # type: ignore[arg-type]


def test_sft_learns_resumes_and_writes_a_manifest(tiny_llama: Path, tmp_path: Path) -> None:
    exs = examples(2)
    out = tmp_path / "sft"
    result = train_stage(
        str(tiny_llama), exs, out, settings("sft", learning_rate=5e-3), data_source="fixture"
    )
    assert len(result.losses) == 4
    assert result.losses[-1] < result.losses[0]
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["hyperparameters"]["learning_rate"] == 5e-3
    assert manifest["hyperparameters"]["lora"]["r"] == 8
    assert manifest["data"]["examples"] == 2 and len(manifest["data"]["examples_sha256"]) == 64
    assert manifest["libraries"]["trl"] and manifest["libraries"]["peft"]
    assert (out / "adapter" / "adapter_config.json").is_file()
    assert sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*")) == [
        "checkpoint-2",
        "checkpoint-4",
    ]
    # resume: continue from checkpoint-4 to step 5; the log keeps the first run's lines
    more = train_stage(
        str(tiny_llama),
        exs,
        out,
        settings("sft", learning_rate=5e-3, max_steps=5),
        data_source="fixture",
        resume=True,
    )
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["result"]["resumed_from"].endswith("checkpoint-4")
    assert manifest["result"]["global_step"] == 5
    assert len(more.losses) == 5


def test_top_layer_lora_adapts_only_the_top_layers(tiny_llama: Path, tmp_path: Path) -> None:
    import transformers

    from personalign.train.trainer import _peft_config, linear_module_names

    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    names = linear_module_names(model)
    assert "q_proj" in names and "down_proj" in names and "lm_head" not in names
    lora = LoraSettings(r=4, alpha=8, top_layers=1)
    config = _peft_config(settings("sft", lora=lora), model)
    assert config.layers_to_transform == [1]  # the tiny model has 2 layers
    import peft

    wrapped = peft.get_peft_model(model, config)
    adapted = {n for n, _ in wrapped.named_parameters() if "lora_A" in n}
    assert adapted and all(".layers.1." in n for n in adapted)


def test_dpo_on_a_merged_sft_adapter_chains_and_loads_through_hf(tiny_llama: Path, tmp_path: Path) -> None:
    exs = examples(1)
    sft = train_stage(
        str(tiny_llama),
        exs,
        tmp_path / "sft",
        settings("sft", learning_rate=5e-3, max_steps=1),
        data_source="fixture",
    )
    dpo = train_stage(
        str(tiny_llama),
        exs,
        tmp_path / "dpo",
        settings("dpo", learning_rate=5e-3, max_steps=1),
        data_source="fixture",
        merge=sft.adapter,
    )
    chain = json.loads((dpo.adapter / CHAIN_FILE).read_text())
    assert chain["merged_before"] == [str(sft.adapter.resolve())]
    manifest = json.loads((tmp_path / "dpo" / MANIFEST).read_text())
    assert (
        manifest["hyperparameters"]["beta"] == 0.1 and manifest["hyperparameters"]["loss_type"] == "sigmoid"
    )
    assert manifest["merged_before"] == str(sft.adapter)
    backend = build_backend(parse_model_spec(f"hf/{tiny_llama}?adapter={dpo.adapter}"))
    reply = asyncio.run(backend.generate(list(exs[0].prompt), GenerateConfig(max_tokens=4), timeout=60))
    assert reply.usage.completion_tokens >= 1


def test_resume_at_max_steps_trains_no_extra_step(tiny_llama: Path, tmp_path: Path) -> None:
    """A checkpoint already at --max-steps, mid-epoch (2 of 4 examples): resuming it must not train
    a step more (the trainer skipped the 2 seen batches and then trained step 3 before)."""
    exs = examples(4)
    out = tmp_path / "sft"
    stage = settings("sft", learning_rate=5e-3, max_steps=2, save_steps=2)
    train_stage(str(tiny_llama), exs, out, stage, data_source="fixture")
    again = train_stage(str(tiny_llama), exs, out, stage, data_source="fixture", resume=True)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["result"]["resumed_from"].endswith("checkpoint-2")
    assert manifest["result"]["global_step"] == 2
    assert len(again.losses) == 2
    assert not (out / "checkpoints" / "checkpoint-3").exists()
    assert (out / "adapter" / "adapter_config.json").is_file()


def test_resume_past_max_steps_is_an_error(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft"
    (out / "checkpoints" / "checkpoint-5").mkdir(parents=True)
    with pytest.raises(ConfigError, match="checkpoint-5 is past --max-steps 3"):
        train_stage(
            str(tiny_llama), examples(1), out, settings("sft", max_steps=3), data_source="f", resume=True
        )

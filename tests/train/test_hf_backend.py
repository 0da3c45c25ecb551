"""The hf/ backend: greedy chat generation in-process, finish reasons, adapters and their identity."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from personalign.errors import ConfigError
from personalign.llm import GenerateConfig, build_backend, parse_model_spec
from personalign.llm.adapters import CHAIN_FILE
from personalign.types import Message

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytestmark = pytest.mark.slow

ASK = [Message(role="user", content="What should I do this weekend?")]


def generate(spec: str, max_tokens: int = 6) -> Any:
    backend = build_backend(parse_model_spec(spec))
    return asyncio.run(backend.generate(ASK, GenerateConfig(max_tokens=max_tokens), timeout=60))


def make_adapter(base: Path, out: Path, seed: int, merged_before: Path | None = None) -> Path:
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    if merged_before is not None:
        model = peft.PeftModel.from_pretrained(model, str(merged_before)).merge_and_unload()
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
    peft.get_peft_model(model, config).save_pretrained(out)
    if merged_before is not None:
        (out / CHAIN_FILE).write_text(json.dumps({"merged_before": [str(merged_before)]}))
    return out


def test_greedy_generation_is_deterministic_and_reports_length_at_the_cap(tiny_llama: Path) -> None:
    first = generate(f"hf/{tiny_llama}")
    second = generate(f"hf/{tiny_llama}")
    assert first.text == second.text
    assert first.usage.completion_tokens == 6
    assert first.finish_reason == "length"
    assert first.usage.prompt_tokens > 5


def test_end_of_turn_stops_generation(tiny_llama: Path, tmp_path: Path) -> None:
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: greedy picks id 0, the end-of-turn
    model.save_pretrained(tmp_path)
    transformers.AutoTokenizer.from_pretrained(tiny_llama).save_pretrained(tmp_path)
    out = generate(f"hf/{tmp_path}", max_tokens=6)
    assert out.finish_reason == "stop"
    assert out.text == ""
    assert out.usage.completion_tokens == 1


def test_an_adapter_changes_the_output_and_the_identity(tiny_llama: Path, tmp_path: Path) -> None:
    adapter = make_adapter(tiny_llama, tmp_path / "a", seed=1)
    base = generate(f"hf/{tiny_llama}", max_tokens=8)
    tuned = generate(f"hf/{tiny_llama}?adapter={adapter}", max_tokens=8)
    assert tuned.text != base.text
    plain = parse_model_spec(f"hf/{tiny_llama}")
    with_adapter = parse_model_spec(f"hf/{tiny_llama}?adapter={adapter}")
    assert with_adapter.identity != plain.identity
    other = make_adapter(tiny_llama, tmp_path / "b", seed=2)
    assert parse_model_spec(f"hf/{tiny_llama}?adapter={other}").identity != with_adapter.identity


def test_a_chained_adapter_merges_its_parent_first(tiny_llama: Path, tmp_path: Path) -> None:
    parent = make_adapter(tiny_llama, tmp_path / "sft", seed=1)
    child = make_adapter(tiny_llama, tmp_path / "dpo", seed=2, merged_before=parent)
    chained = generate(f"hf/{tiny_llama}?adapter={child}", max_tokens=8)
    # by hand: merge the parent, then apply the child
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama)
    model = peft.PeftModel.from_pretrained(model, str(parent)).merge_and_unload()
    model = peft.PeftModel.from_pretrained(model, str(child)).merge_and_unload().eval()
    tok = transformers.AutoTokenizer.from_pretrained(tiny_llama)
    text = tok.apply_chat_template(
        [{"role": "user", "content": ASK[0].content}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=2)
    expected = tok.decode(out[0][ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert chained.text == expected
    # the identity covers the parent too
    assert parse_model_spec(f"hf/{tiny_llama}?adapter={child}").options["adapter_sha"]


def test_bad_hf_options_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a PEFT adapter"):
        parse_model_spec(f"hf/smollm2?adapter={tmp_path}")
    with pytest.raises(ConfigError, match="only apply to hf/"):
        parse_model_spec("local/smollm2?adapter=x")
    with pytest.raises(ConfigError, match="dtype"):
        build_backend(parse_model_spec("hf/smollm2?dtype=int3"))
    with pytest.raises(ConfigError, match="unknown option"):
        parse_model_spec("hf/smollm2?adapter_sha=abc")


def test_run_hicupid_evaluates_a_trained_adapter_through_hf(tiny_llama: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from personalign.cli import app

    adapter = make_adapter(tiny_llama, tmp_path / "sft", seed=1)
    args = ["--judge", "scripted/b", "--context", "gold", "--split", "test_1", "--limit", "1",
            "--max-tokens", "4", "--cache", str(tmp_path / "c.sqlite"), "--no-progress"]  # fmt: skip
    summaries = {}
    for name, model in (("base", f"hf/{tiny_llama}"), ("tuned", f"hf/{tiny_llama}?adapter={adapter}")):
        out = CliRunner().invoke(
            app, ["run", "hicupid", "--model", model, "--run-dir", str(tmp_path / name), *args]
        )
        assert out.exit_code == 0, out.output
        summaries[name] = json.loads((tmp_path / name / "summary.json").read_text())
        samples = [json.loads(x) for x in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
        assert samples and all("answer" in s["steps"] for s in samples)
        answer = samples[0]["steps"]["answer"]
        assert answer["finish_reasons"] == ["length"]  # 4 tokens from a random model: cut off, and said so
    base_manifest = json.loads((tmp_path / "base" / "manifest.json").read_text())
    tuned_manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert base_manifest["identity_hash"] != tuned_manifest["identity_hash"]


PROMPTS = [
    [Message(role="user", content="Hi")],
    [Message(role="user", content="What should I do this weekend? I like climbing and long walks.")],
    [Message(role="system", content="Be brief."), Message(role="user", content="Any book to read?")],
    [Message(role="user", content="Plan a trip for my family of four to the seaside next summer, please.")],
    [Message(role="user", content="Hello again")],
]


def _batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every batched generate call the `hf/` backend makes from now on."""
    from personalign.llm.backends.hf import HFBackend

    sizes: list[int] = []
    original = HFBackend._call_batch

    def spy(self: HFBackend, prompts: Any, config: GenerateConfig) -> Any:
        sizes.append(len(prompts))
        return original(self, prompts, config)

    monkeypatch.setattr(HFBackend, "_call_batch", spy)
    return sizes


def test_concurrent_calls_are_batched_with_the_same_greedy_outputs(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _batch_sizes(monkeypatch)

    def replies(spec: str) -> list[Any]:
        backend = build_backend(parse_model_spec(spec))

        async def all_calls() -> list[Any]:
            config = GenerateConfig(max_tokens=12)
            return list(await asyncio.gather(*(backend.generate(p, config, timeout=60) for p in PROMPTS)))

        return asyncio.run(all_calls())

    one_by_one = replies(f"hf/{tiny_llama}?batch=1")
    assert sizes == [1] * len(PROMPTS)
    sizes.clear()
    batched = replies(f"hf/{tiny_llama}?batch=4")
    assert sizes == [4, 1]  # prompts of different lengths share a left-padded generate call
    assert [r.text for r in batched] == [r.text for r in one_by_one]
    assert [r.finish_reason for r in batched] == [r.finish_reason for r in one_by_one]
    assert [r.usage for r in batched] == [r.usage for r in one_by_one]  # pads are not prompt tokens
    assert len({r.usage.prompt_tokens for r in batched}) > 1


def test_calls_with_different_settings_or_a_sampling_seed_are_not_batched_together(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _batch_sizes(monkeypatch)
    backend = build_backend(parse_model_spec(f"hf/{tiny_llama}?batch=8"))
    short, long = GenerateConfig(max_tokens=3), GenerateConfig(max_tokens=5)
    seeded = GenerateConfig(max_tokens=3, temperature=0.7, seed=1)

    async def calls() -> list[Any]:
        jobs = [
            backend.generate(p, c, timeout=60)
            for p, c in zip(PROMPTS, [short, long, short, long, short], strict=True)
        ]
        jobs += [backend.generate(p, seeded, timeout=60) for p in PROMPTS[:2]]
        return list(await asyncio.gather(*jobs))

    out = asyncio.run(calls())
    assert sorted(sizes) == [1, 1, 2, 3]
    assert [r.usage.completion_tokens for r in out[:5]] == [3, 5, 3, 5, 3]


def test_a_row_that_stopped_early_is_cut_at_its_end_of_turn_not_at_the_padding() -> None:
    from personalign.llm.backends.hf import HFBackend

    class Tok:
        def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
            return " ".join(str(i) for i in ids if not (skip_special_tokens and i in (0, 2)))

    config = GenerateConfig(max_tokens=6)
    ended = HFBackend._response(Tok(), [5, 6, 0, 2, 2, 2], 7, {0}, config)
    assert (ended.text, ended.finish_reason, ended.usage.completion_tokens) == ("5 6", "stop", 3)
    cut = HFBackend._response(Tok(), [5, 6, 7, 8, 9, 4], 7, {0}, config)
    assert (cut.finish_reason, cut.usage.completion_tokens) == ("length", 6)


def test_a_bad_batch_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="batch"):
        build_backend(parse_model_spec("hf/smollm2?batch=0"))
    with pytest.raises(ConfigError, match="only apply to hf/"):
        parse_model_spec("local/smollm2?batch=4")


def test_hf_calls_wait_for_their_batch_without_the_http_timeout() -> None:
    # a call's time includes the batch ahead of it: the HTTP default (120 s) would cut it off and retry
    assert parse_model_spec("hf/smollm2").timeout == 3600.0
    assert parse_model_spec("hf/smollm2").concurrency == 8
    assert parse_model_spec("hf/smollm2?timeout=30").timeout == 30.0
    assert parse_model_spec("openai/gpt-4o").timeout == 120.0

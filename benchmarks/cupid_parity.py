"""Byte parity of CUPID `--protocol paper` with the official evaluator (kixlab/CUPID at the pinned commit).

Imports the official evaluation code from a checkout (``--upstream``), with its API clients stubbed
so that each model call is captured instead of sent, drives the official ``evaluate()`` over our
fixture instances (converted to the official instance structure), and compares every captured
message list (roles, order, text) and its sampling parameters with what personalign sends under
``--protocol paper`` for the same instance and setting. Prints the count of identical message
lists and a diff of any that differ. No official code is stored in this repository.

    git --git-dir=/work/.mirror/kixlab+CUPID/repo archive a8560ca | tar -x -C /tmp/cupid-upstream
    PYTHONPATH=src python benchmarks/cupid_parity.py --upstream /tmp/cupid-upstream
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.protocol import (
    SOURCE,
    load_paper_prompts,
    parse_paper_checklist,
    parse_paper_inferred,
    parse_paper_judgement,
    parse_paper_match,
)
from personalign.benchmarks.cupid.schema import CupidInstance
from personalign.benchmarks.cupid.steps import CupidConfig, CupidPrompts

EVALUATOR = "gpt-4o-2024-11-20"  # the official default --evaluator (an OpenAI model: `developer` role)
SUBJECT = "personalign-parity-subject"
CANNED_PREFERENCE = "Updates for the harbour board should open with the tide table and stay under 200 words."
CANNED_ITEMS = ["Does the update open with the tide table?", "Does the update stay under 200 words?"]
CANNED_RESPONSE = "Here is the update you asked for, opening with the tide table."

Call = dict[str, Any]


def _stub_modules() -> None:
    """Stand-ins for the SDKs the official code imports; a call through them is a bug in this script."""

    class _Unreachable:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"parity script: the official code reached the network client ({name})")

    openai = types.ModuleType("openai")
    openai.Client = openai.OpenAI = _Unreachable  # type: ignore[attr-defined]
    anthropic = types.ModuleType("anthropic")
    anthropic.Anthropic = anthropic.AnthropicBedrock = _Unreachable  # type: ignore[attr-defined]
    google = types.ModuleType("google")
    genai = types.ModuleType("google.genai")
    genai.Client = _Unreachable  # type: ignore[attr-defined]
    genai.types = types.ModuleType("google.genai.types")  # type: ignore[attr-defined]
    google.genai = genai  # type: ignore[attr-defined]
    datasets = types.ModuleType("datasets")
    datasets.load_dataset = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no datasets here"))  # type: ignore[attr-defined]
    sys.modules.update(
        {
            "openai": openai,
            "anthropic": anthropic,
            "google": google,
            "google.genai": genai,
            "google.genai.types": genai.types,  # type: ignore[attr-defined]
            "datasets": datasets,
        }
    )


# Score lines as judges write them, to exercise the official clean-up (cut at "/", ".", blank line; "**").
SCORE_SHAPES = ("7", "**8**/10", "9.0", "6\n\nThe reply misses one item.", "**5**")
_variant = [0]


def _reply(messages: list[dict[str, str]]) -> str:
    """A canned answer in the shape each official step parses, so the pipeline runs to its end."""
    text = "\n".join(m["content"] for m in messages)
    if "### Most Likely Preference" in text and "Log of Previous Interaction Sessions" in text:
        return f"### Analysis\n\nRead the log.\n\n### Most Likely Preference\n\n{CANNED_PREFERENCE}\n"
    if '"checklist"' in text:
        return (
            "**Analysis**\n\nTwo aspects.\n\n**Checklist**\n\n```json\n"
            + json.dumps({"checklist": CANNED_ITEMS})
            + "\n```"
        )
    if "#### Checklist" in text:
        n = len(
            [
                line
                for line in messages[-1]["content"].split("#### Checklist", 1)[1].splitlines()
                if line.strip()
            ]
        )
        results = [{"index": i + 1, "label": "Partially Covered"} for i in range(n)]
        if "#### Criterion" in text:
            return json.dumps(results)
        return "```json\n" + json.dumps({"results": results}) + "\n```"
    if "### Evaluation Score" in text:
        return (
            "### Evaluation of AI Assistant's Response\n\nFine.\n\n"
            "### Evaluation Label\n\nGood\n\n### Evaluation Score\n\n"
            + SCORE_SHAPES[_variant[0] % len(SCORE_SHAPES)]
        )
    return CANNED_RESPONSE


def official_calls(
    upstream: Path, instances: list[CupidInstance], use_matcher: bool
) -> dict[str, list[Call]]:
    """Run the official `evaluate()` (task both) per instance and capture every model call, in order."""
    _stub_modules()
    os.environ.pop("OPENAI_API_KEY", None)
    if str(upstream) not in sys.path:
        sys.path.insert(0, str(upstream))
    import utils.generation as generation  # type: ignore[import-not-found]
    from evaluation.models.model import Model, register_model  # type: ignore[import-not-found]
    from evaluation.pipeline.evaluate import evaluate  # type: ignore[import-not-found]

    captured: list[Call] = []

    def capture(kind: str) -> Callable[..., str]:
        def call(model_name: str, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> str:
            captured.append(
                {
                    "model": model_name,
                    "messages": [dict(m) for m in messages],
                    "temperature": temperature,
                    "max_tokens": max_tokens,
                    "via": kind,
                }
            )
            reply = _reply(messages)
            captured[-1]["reply"] = reply
            return reply

        return call

    generation.MODEL_DICTIONARY["openai"] = [EVALUATOR]
    generation.generate_openai = capture("openai")
    generation.generate_vllm = capture("vllm")

    @register_model
    class CaptureSubject(Model):  # type: ignore[misc]
        """The official example model's call shape (evaluation/models/gpt_41_nano.py), captured."""

        model_name = SUBJECT

        def __call__(self, system_prompt: str, user_prompt: str) -> str:
            messages = [
                {"role": "system", "content": system_prompt},
                {"role": "user", "content": user_prompt},
            ]
            captured.append(
                {
                    "model": SUBJECT,
                    "messages": messages,
                    "temperature": 0,
                    "max_tokens": 8192,
                    "via": "subject",
                }
            )
            reply = _reply(messages).strip()
            captured[-1]["reply"] = reply
            return reply

    from evaluation.pipeline.result import process_generation_result  # type: ignore[import-not-found]

    out: dict[str, list[Call]] = {}
    with tempfile.TemporaryDirectory() as results_dir:
        for number, instance in enumerate(instances):
            captured.clear()
            _variant[0] = number
            name = instance.id.replace("#", "__")
            evaluate(
                SUBJECT,
                EVALUATOR,
                name,
                to_official(instance),
                results_dir,
                use_matcher=use_matcher,
                task="both",
            )
            results = json.loads((Path(results_dir) / SUBJECT / f"{name}.json").read_text())
            inference = results["inference"]
            parsed = {
                "preference": inference["inferred"]["preference"],
                "checklist": inference["inferred"]["checklist"],
                "infer_to_gt": [r["label"] for r in inference["match"]["infer_to_gt"]],
                "gt_to_infer": [r["label"] for r in inference["match"]["gt_to_infer"]],
                "score": float(process_generation_result(results["generation"])["score"]),
            }
            out[instance.id] = [*captured, {"parsed": parsed}]
    return out


def our_parse(calls: list[Call], instance: CupidInstance, matcher_format: str) -> dict[str, Any]:
    """Our --protocol paper parsers applied to the replies the official pipeline received."""
    replies = [call["reply"] for call in calls[:6]]
    return {
        "preference": parse_paper_inferred(replies[0]),
        "checklist": parse_paper_checklist(replies[1]),
        "infer_to_gt": parse_paper_match(replies[2], len(CANNED_ITEMS), matcher_format),
        "gt_to_infer": parse_paper_match(replies[3], len(instance.current_checklist), matcher_format),
        "score": parse_paper_judgement(replies[5])["score"],
    }


def to_official(instance: CupidInstance) -> dict[str, Any]:
    """Our instance in the official instance structure (the fields `evaluate()` reads)."""
    return {
        "current_request": instance.current_request,
        "current_contextual_preference": instance.current_contextual_preference,
        "current_checklist": list(instance.current_checklist),
        "prior_interactions": [
            {
                "context_factor": s.context_factor,
                "contextual_preference": s.contextual_preference,
                "dialogue": [{"role": m.role, "content": m.content} for m in s.dialogue],
            }
            for s in instance.prior_interactions
        ],
    }


STEPS = ("infer", "decompose", "match/inferred->gold", "match/gold->inferred", "generate", "judge")


def our_calls(upstream: Path, instance: CupidInstance, matcher_format: str) -> list[Call]:
    """What personalign sends under --protocol paper for the same instance, in the official order."""
    config = CupidConfig(
        subject="scripted/s",
        decomposer="scripted/j",
        matcher="scripted/j",
        judge="scripted/j",
        task="both",
        protocol="paper",
        system_role="developer",
        matcher_format=matcher_format,  # type: ignore[arg-type]
        subject_max_tokens=8192,
    )
    prompts = CupidPrompts(config, load_paper_prompts(upstream))
    history = prompts.history(instance.prior_interactions)
    calls = [
        prompts.infer(instance.current_request, history),
        prompts.decompose(CANNED_PREFERENCE),
        prompts.match(instance.current_contextual_preference, CANNED_ITEMS),
        prompts.match(CANNED_PREFERENCE, instance.current_checklist),
        prompts.generate(instance, history),
        prompts.judge(instance, CANNED_RESPONSE),
    ]
    return [
        {
            "messages": [{"role": m.role, "content": m.content} for m in call.messages],
            "temperature": call.config.temperature,
            "max_tokens": call.config.max_tokens,
        }
        for call in calls
    ]


def _lines(messages: list[dict[str, str]]) -> list[str]:
    lines: list[str] = []
    for message in messages:
        lines.append(f"<<{message['role']}>>")
        lines.extend(message["content"].split("\n"))
    return lines


def message_diff(theirs: list[dict[str, str]], ours: list[dict[str, str]]) -> str:
    """A unified diff of two message lists, one line per text line, each message under a role header."""
    diff = difflib.unified_diff(_lines(theirs), _lines(ours), "official", "personalign", lineterm="", n=1)
    return "\n".join(diff)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--upstream", type=Path, required=True, help=f"checkout of {SOURCE.repo} at {SOURCE.commit}"
    )
    parser.add_argument("--data", default="fixture", help="CUPID data (default: the bundled fixture)")
    parser.add_argument("--limit", type=int, default=None, help="first N instances only")
    args = parser.parse_args()
    upstream = args.upstream.resolve()
    load_paper_prompts(upstream)  # the pinned sha256 of every file: a different checkout stops here
    instances = load_cupid(args.data).instances[: args.limit]
    total = identical = 0
    params_ok = 0
    parses_total = parses_same = 0
    diffs: list[str] = []
    per_step: dict[str, list[int]] = {}
    for use_matcher, fmt in ((False, "default"), (True, "prefmatcher")):
        official = official_calls(upstream, instances, use_matcher)
        for instance in instances:
            theirs, their_parsed = official[instance.id][:-1], official[instance.id][-1]["parsed"]
            ours = our_calls(upstream, instance, fmt)
            parses_total += 1
            our_parsed = our_parse(theirs, instance, fmt)
            if our_parsed == their_parsed:
                parses_same += 1
            else:
                diffs.append(
                    f"{instance.id} [{fmt}] parsed differently: official {their_parsed}, ours {our_parsed}"
                )
            if len(theirs) != len(ours):
                diffs.append(f"{instance.id} [{fmt}]: {len(theirs)} official calls, {len(ours)} ours")
                total += len(ours)
                continue
            for step, their, our in zip(STEPS, theirs, ours, strict=True):
                if use_matcher and not step.startswith("match"):
                    continue  # the PrefMatcher pass repeats the other steps unchanged
                key = step if not step.startswith("match") else f"{step} [{fmt}]"
                tally = per_step.setdefault(key, [0, 0])
                total += 1
                tally[1] += 1
                same = their["messages"] == our["messages"]
                params = (float(their["temperature"]), their["max_tokens"]) == (
                    our["temperature"],
                    our["max_tokens"],
                )
                params_ok += params
                if same:
                    identical += 1
                    tally[0] += 1
                else:
                    diffs.append(f"{instance.id} {key}:\n{message_diff(their['messages'], our['messages'])}")
                if not params:
                    diffs.append(
                        f"{instance.id} {key}: sampling official "
                        f"{their['temperature']}/{their['max_tokens']}, "
                        f"ours {our['temperature']}/{our['max_tokens']}"
                    )
    print(f"upstream {SOURCE.repo}@{SOURCE.commit}, {len(instances)} instances")
    for key, (same, n) in per_step.items():
        print(f"  {key:32s} {same}/{n} identical")
    print(f"byte-identical message lists: {identical}/{total} ({100 * identical / max(1, total):.1f}%)")
    print(f"identical sampling (temperature, max_tokens): {params_ok}/{total}")
    print(
        "replies parsed to the same values (preference, checklist, labels, score): "
        f"{parses_same}/{parses_total}"
    )
    for diff in diffs:
        print(diff)
    same = identical == total and params_ok == total and parses_same == parses_total
    return 0 if same and not diffs else 1


if __name__ == "__main__":
    raise SystemExit(main())

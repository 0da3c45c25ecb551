"""CPU smoke of the training recipe (issue 15): SFT then DPO (30 + 5 steps) on the HiCUPID
fixture's train split with the bundled SmolLM2-135M, then `personalign run hicupid` on the held-out
test_1 questions for the base model, the SFT adapter and the SFT+DPO adapter (through the hf/
backend), printing the first / last loss of each stage and a table of ROUGE-L / BLEU.
Run: `make train-smoke` (needs the train extra).

The CPU settings are a smoke, not the paper's: LoRA r 16 on the top layers only, gold context,
short sequences; see docs/training.md for the full-scale recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "personalign"


def personalign(*args: str) -> None:
    cmd = [str(BIN), *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def losses(stage_dir: Path) -> list[float]:
    rows = [json.loads(x) for x in (stage_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [float(r["loss"]) for r in rows if "loss" in r]


def evaluate(model: str, run_dir: Path, args: argparse.Namespace) -> dict[str, float]:
    personalign(
        "run", "hicupid", "--model", model, "--judge", "scripted/judge", "--context", args.context,
        "--split", args.eval_split, "--limit", str(args.eval_limit), "--max-tokens", str(args.max_tokens),
        "--run-dir", str(run_dir), "--cache", str(args.out / "calls.sqlite"), "--no-progress",
    )  # fmt: skip
    summary = json.loads((run_dir / "summary.json").read_text())
    overall = summary["qa"]["all"]
    return {
        "rouge_l": float(overall["rouge_l"]),
        "bleu": float(overall["bleu"]),
        "n": int(overall["n"]),
        "errors": int(summary["qa"]["n_errors"]),
        "truncated": int(summary["qa"]["flags"].get("truncated", 0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/train-smoke"))
    parser.add_argument("--sft-steps", type=int, default=30)
    parser.add_argument("--dpo-steps", type=int, default=5)
    parser.add_argument("--sft-lr", default="1e-3")
    parser.add_argument("--dpo-lr", default="2e-4")
    parser.add_argument("--context", default="gold")
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--eval-split", default="test_1")
    parser.add_argument("--eval-limit", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--skip-train", action="store_true", help="Reuse the adapters in --out.")
    parser.add_argument("--resume", action="store_true", help="Continue an interrupted training in --out.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_train:
        personalign(
            "train", "sft-dpo", "--out", str(args.out), "--base", "smollm2", "--context", args.context,
            "--max-length", str(args.max_length), "--lora-r", "16", "--lora-alpha", "32",
            "--lora-top-layers", "4", "--no-gradient-checkpointing", "--lr", args.sft_lr,
            "--max-steps", str(args.sft_steps), "--dpo-lr", args.dpo_lr,
            "--dpo-max-steps", str(args.dpo_steps),
            "--save-steps", "10", *(["--resume"] if args.resume else []),
        )  # fmt: skip
    adapter = args.out / "dpo" / "adapter"
    results = {
        "sft_losses": losses(args.out / "sft"),
        "dpo_losses": losses(args.out / "dpo"),
        "base": evaluate("hf/smollm2", args.out / "run-base", args),
        "sft": evaluate(f"hf/smollm2?adapter={args.out / 'sft' / 'adapter'}", args.out / "run-sft", args),
        "sft_dpo": evaluate(f"hf/smollm2?adapter={adapter}", args.out / "run-sft-dpo", args),
    }
    (args.out / "smoke.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))


def table(results: dict[str, object]) -> str:
    """The losses and the base / SFT / SFT+DPO scores as a small text table."""
    lines = []
    for stage in ("sft", "dpo"):
        losses = results[f"{stage}_losses"]
        assert isinstance(losses, list)
        if losses:
            k = max(1, len(losses) // 4)
            head, tail = sum(losses[:k]) / k, sum(losses[-k:]) / k
            lines.append(
                f"{stage.upper()} loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} steps "
                f"(mean of the first / last {k}: {head:.3f} -> {tail:.3f})"
            )
    lines.append(f"{'model':8s} {'ROUGE-L':>8s} {'BLEU':>8s} {'scored':>7s} {'errors':>7s} {'truncated':>9s}")
    for name, label in (("base", "base"), ("sft", "SFT"), ("sft_dpo", "SFT+DPO")):
        r = results[name]
        assert isinstance(r, dict)
        scores = f"{r['rouge_l']:8.4f} {r['bleu']:8.4f}"
        lines.append(f"{label:8s} {scores} {r['n']:7d} {r['errors']:7d} {r['truncated']:9d}")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

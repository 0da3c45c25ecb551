"""CPU smoke of the training recipe (issue 15): SFT then DPO for a few dozen steps on the HiCUPID
fixture's train split with the bundled SmolLM2-135M, then `personalign run hicupid` on held-out
test questions for the base model and the trained adapter (through the hf/ backend), printing the
loss curve and ROUGE-L / BLEU of both. Run: `make train-smoke` (needs the train extra).

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
    parser.add_argument("--sft-steps", type=int, default=16)
    parser.add_argument("--dpo-steps", type=int, default=4)
    parser.add_argument("--context", default="gold")
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--eval-split", default="test_1")
    parser.add_argument("--eval-limit", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=80)
    parser.add_argument("--skip-train", action="store_true", help="Reuse the adapters in --out.")
    parser.add_argument("--resume", action="store_true", help="Continue an interrupted training in --out.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_train:
        personalign(
            "train", "sft-dpo", "--out", str(args.out), "--base", "smollm2", "--context", args.context,
            "--max-length", str(args.max_length), "--lora-r", "16", "--lora-alpha", "32",
            "--lora-top-layers", "4", "--no-gradient-checkpointing", "--lr", "1e-3",
            "--max-steps", str(args.sft_steps), "--dpo-lr", "5e-5", "--dpo-max-steps", str(args.dpo_steps),
            "--save-steps", "5", *(["--resume"] if args.resume else []),
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
    sft, dpo = results["sft_losses"], results["dpo_losses"]
    print(f"SFT loss {sft[0]:.3f} -> {sft[-1]:.3f} over {len(sft)} steps")
    print(f"DPO loss {dpo[0]:.3f} -> {dpo[-1]:.3f} over {len(dpo)} steps")
    for name in ("base", "sft", "sft_dpo"):
        r = results[name]
        print(
            f"{name:8s} ROUGE-L {r['rouge_l']:.4f}  BLEU {r['bleu']:.4f}  "
            f"(n={r['n']}, errors={r['errors']}, truncated={r['truncated']})"
        )


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""CPU smoke of the training recipe (issue 15): SFT then DPO on the HiCUPID fixture's train split
with the bundled SmolLM2-135M, then `personalign run hicupid` on the held-out test_1 questions for
the base model, the SFT adapter and the SFT+DPO adapter (through the hf/ backend). It prints the
per-epoch mean loss of each stage, the DPO reward margin and a table of ROUGE-L / BLEU, and exits
non-zero when the SFT loss did not fall or a trained model does not score above the base.
Run: `make train-smoke` (needs the train extra).

The CPU settings are a smoke, not the paper's: LoRA r 16 on the top layers only, gold context,
short sequences, one torch thread per process; see docs/training.md for the full-scale recipe.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

BIN = Path(sys.executable).parent / "personalign"


def personalign(*args: str) -> None:
    cmd = [str(BIN), *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def epoch_means(stage_dir: Path, key: str = "loss") -> list[float]:
    """The mean of ``key`` over each epoch's logged steps (steps per epoch from the manifest)."""
    manifest = json.loads((stage_dir / "manifest.json").read_text())
    hp = manifest["hyperparameters"]
    per_epoch = max(1, math.ceil(manifest["data"]["examples"] / (hp["batch_size"] * hp["grad_accum"])))
    rows = [json.loads(x) for x in (stage_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    groups: dict[int, list[float]] = {}
    for row in rows:
        if key in row and "step" in row:
            groups.setdefault((int(row["step"]) - 1) // per_epoch, []).append(float(row[key]))
    return [sum(v) / len(v) for _, v in sorted(groups.items())]


def step_values(stage_dir: Path, key: str) -> list[float]:
    rows = [json.loads(x) for x in (stage_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [float(r[key]) for r in rows if key in r]


def start_eval(model: str, name: str, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], IO[Any]]:
    """Start `personalign run hicupid` for ``model`` in the background (its output to run-NAME.log)."""
    run_dir = args.out / f"run-{name}"
    cmd = [
        str(BIN), "run", "hicupid", "--model", model, "--judge", "scripted/judge", "--context", args.context,
        "--split", args.eval_split, "--limit", str(args.eval_limit), "--max-tokens", str(args.max_tokens),
        "--run-dir", str(run_dir), "--cache", str(args.out / f"calls-{name}.sqlite"), "--no-progress",
    ]  # fmt: skip
    print("+", " ".join(cmd), f"> {args.out / f'run-{name}.log'}", flush=True)
    log = (args.out / f"run-{name}.log").open("wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log


def finish_eval(
    proc: subprocess.Popen[bytes], log: IO[Any], name: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Wait for one evaluation; its overall scores and each scored question's ROUGE-L / BLEU."""
    code = proc.wait()
    log.close()
    if code != 0:
        sys.exit(f"evaluation of {name} failed (exit {code}); see {args.out / f'run-{name}.log'}")
    run_dir = args.out / f"run-{name}"
    summary = json.loads((run_dir / "summary.json").read_text())
    overall = summary["qa"]["all"]
    per_question = {}
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line) if line.strip() else {}
        qa = sample.get("results", {}).get("qa", {})
        if qa.get("status") == "ok":
            per_question[sample["instance_id"]] = [qa["scores"]["rouge_l"], qa["scores"]["bleu"]]
    return {
        "rouge_l": float(overall["rouge_l"]),
        "bleu": float(overall["bleu"]),
        "n": int(overall["n"]),
        "errors": int(summary["qa"]["n_errors"]),
        "error_reasons": summary["qa"].get("errors", {}),
        "per_question": per_question,
    }


def paired(results: dict[str, Any]) -> dict[str, Any]:
    """Each model's mean ROUGE-L / BLEU on the questions all three scored (an error, e.g. a reply
    cut off at --max-tokens, drops the question for every model, not only for the one that failed)."""
    names = ("base", "sft", "sft_dpo")
    common = set.intersection(*(set(results[n]["per_question"]) for n in names))
    out: dict[str, Any] = {"n": len(common)}
    for n in names:
        scores = [results[n]["per_question"][q] for q in sorted(common)]
        out[n] = {
            "rouge_l": sum(s[0] for s in scores) / len(scores) if scores else 0.0,
            "bleu": sum(s[1] for s in scores) / len(scores) if scores else 0.0,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/train-smoke"))
    parser.add_argument("--sft-epochs", default="3")
    parser.add_argument("--grad-accum", default="4")
    parser.add_argument("--dpo-steps", type=int, default=6, help="DPO optimizer steps (6 x 4 = one epoch).")
    parser.add_argument("--sft-lr", default="1e-3")
    parser.add_argument("--dpo-lr", default="1e-3")
    parser.add_argument("--top-layers", default="4")
    parser.add_argument("--context", default="gold")
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--eval-split", default="test_1")
    parser.add_argument("--eval-limit", type=int, default=12)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--threads", default="1", help="Torch threads per process (OMP_NUM_THREADS).")
    parser.add_argument("--skip-train", action="store_true", help="Reuse the adapters in --out.")
    parser.add_argument("--resume", action="store_true", help="Continue an interrupted training in --out.")
    args = parser.parse_args()
    # With more runnable threads than cores torch's OpenMP threads spin against each other; one
    # thread per process, and the base evaluation runs beside the training on the second core.
    os.environ["OMP_NUM_THREADS"] = args.threads
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args.out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.1f} on {os.cpu_count()} CPUs", flush=True)
    started = time.monotonic()
    base_eval = start_eval("hf/smollm2", "base", args)
    if not args.skip_train:
        personalign(
            "train", "sft-dpo", "--out", str(args.out), "--base", "smollm2", "--context", args.context,
            "--max-length", str(args.max_length), "--lora-r", "16", "--lora-alpha", "32",
            "--lora-dropout", "0", "--lora-top-layers", args.top_layers, "--no-gradient-checkpointing",
            "--lr", args.sft_lr, "--epochs", args.sft_epochs, "--grad-accum", args.grad_accum,
            "--dpo-lr", args.dpo_lr, "--dpo-max-steps", str(args.dpo_steps),
            "--save-steps", "6", *(["--resume"] if args.resume else []),
        )  # fmt: skip
    trained = time.monotonic()
    sft_eval = start_eval(f"hf/smollm2?adapter={args.out / 'sft' / 'adapter'}", "sft", args)
    dpo_eval = start_eval(f"hf/smollm2?adapter={args.out / 'dpo' / 'adapter'}", "sft-dpo", args)
    results: dict[str, Any] = {
        "load_average_start": round(load, 2),
        "sft_epoch_loss": epoch_means(args.out / "sft"),
        "dpo_epoch_loss": epoch_means(args.out / "dpo"),
        "dpo_margins": step_values(args.out / "dpo", "rewards/margins"),
        "dpo_accuracies": step_values(args.out / "dpo", "rewards/accuracies"),
        "base": finish_eval(*base_eval, "base", args),
        "sft": finish_eval(*sft_eval, "sft", args),
        "sft_dpo": finish_eval(*dpo_eval, "sft-dpo", args),
    }
    results["paired"] = paired(results)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    results["seconds"] = {
        "train": round(trained - started, 1),
        "total": round(time.monotonic() - started, 1),
        # CPU time of the training and evaluation processes: what an idle machine would need
        "cpu": round(children.ru_utime + children.ru_stime, 1),
    }
    results["load_average_end"] = round(os.getloadavg()[0], 2)
    results["failures"] = failures(results)
    (args.out / "smoke.json").write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    if results["failures"]:
        sys.exit("SMOKE FAILED: " + "; ".join(results["failures"]))
    print("smoke passed: the SFT loss fell and both trained models score above the base")


def failures(results: dict[str, Any]) -> list[str]:
    """What the smoke claims and did not show: a falling SFT loss, and both trained models above
    the base, over all scored questions and over the questions all three scored."""
    out = []
    sft = results["sft_epoch_loss"]
    if len(sft) < 2 or not sft[-1] < sft[0]:
        out.append(f"SFT epoch-mean loss did not fall ({sft})")
    for label, scores in (("", results), ("paired ", results["paired"])):
        base = scores["base"]
        for name in ("sft", "sft_dpo"):
            for metric in ("rouge_l", "bleu"):
                if not scores[name][metric] > base[metric]:
                    out.append(
                        f"{label}{name} {metric} {scores[name][metric]:.4f} not above base {base[metric]:.4f}"
                    )
    return out


def table(results: dict[str, Any]) -> str:
    """The losses, the DPO margin and the base / SFT / SFT+DPO scores as a small text table."""
    lines = []
    for stage in ("sft", "dpo"):
        means = results[f"{stage}_epoch_loss"]
        if means:
            lines.append(f"{stage.upper()} epoch-mean loss: " + " -> ".join(f"{m:.3f}" for m in means))
    margins = results["dpo_margins"]
    if margins:
        lines.append(
            "DPO reward margin per step: " + ", ".join(f"{m:.3f}" for m in margins)
            + f" (reward accuracy, last step: {results['dpo_accuracies'][-1]:.2f})"
        )  # fmt: skip
    pair = results["paired"]
    lines.append(
        f"{'model':8s} {'ROUGE-L':>8s} {'BLEU':>8s} {'scored':>7s} {'errors':>7s}"
        f"   on the {pair['n']} questions all three scored: {'ROUGE-L':>8s} {'BLEU':>8s}"
    )
    for name, label in (("base", "base"), ("sft", "SFT"), ("sft_dpo", "SFT+DPO")):
        r, p = results[name], pair[name]
        lines.append(
            f"{label:8s} {r['rouge_l']:8.4f} {r['bleu']:8.4f} {r['n']:7d} {r['errors']:7d}"
            f"   {'':>36s} {p['rouge_l']:8.4f} {p['bleu']:8.4f}"
        )
    for name in ("base", "sft", "sft_dpo"):
        for question, reason in results[name]["error_reasons"].items():
            lines.append(f"  {name} error on {question}: {reason[:110]}")
    secs = results["seconds"]
    lines.append(
        f"wall time: training {secs['train']:.0f} s, total {secs['total']:.0f} s; "
        f"CPU time of the child processes {secs['cpu']:.0f} s"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Training throughput (tokens/s) of LoRA SFT and DPO on the HiCUPID fixture, on CPU and, where one
is present, on a CUDA GPU. Each measurement trains a few optimizer steps through the real recipe
(`personalign.train.trainer.train_stage`) and reports trained tokens per second of wall time.

    PYTHONPATH=src python benchmarks/train_throughput.py --steps 4 --max-length 256
    PYTHONPATH=src python benchmarks/train_throughput.py --base /path/to/Llama-3.1-8B-Instruct --lora-r 256

Without a CUDA GPU the GPU measurement is skipped with a message. On a busy 2-core CPU the numbers
are dominated by contention: run it with nothing else running (the load average is printed), and
compare `--threads 1` with the default (torch's OpenMP threads spin against other jobs' threads).
The process CPU time of each measurement (model loading included) is printed too: with one
thread, tokens per CPU second is close to what an idle core gives, whatever the load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.train.examples import build_examples
from personalign.train.settings import LoraSettings, TrainSettings
from personalign.train.trainer import train_stage


def measure(args: argparse.Namespace, kind: str, device: str) -> dict[str, object]:
    import torch

    if device == "cpu":
        torch.cuda.is_available = lambda: False  # force the CPU path of the recipe
    examples = asyncio.run(build_examples(load_hicupid(args.data), context=args.context, limit=args.limit))
    lora = LoraSettings(r=args.lora_r, alpha=2 * args.lora_r, dropout=0.0, top_layers=args.top_layers)
    settings = TrainSettings(
        kind=kind,  # type: ignore[arg-type]
        max_steps=args.steps,
        max_length=args.max_length,
        lora=lora,
        save_steps=10_000,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    cpu_before = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        result = train_stage(args.base, examples, Path(tmp) / kind, settings, data_source=args.data)
    cpu = time.process_time() - cpu_before  # includes loading the model: an upper bound
    return {
        "kind": kind,
        "device": device,
        "steps": args.steps,
        "tokens": result.tokens,
        "seconds": round(result.seconds, 2),
        "tokens_per_s": round(result.tokens_per_s, 2),
        "threads": torch.get_num_threads(),
        "cpu_seconds": round(cpu, 2),
        "tokens_per_cpu_s": round(result.tokens / cpu, 2) if cpu > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2")
    parser.add_argument("--data", default="fixture")
    parser.add_argument("--context", default="gold")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--top-layers", type=int, default=None)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--kinds", nargs="+", default=["sft", "dpo"])
    parser.add_argument("--out", type=Path, default=None, help="Also write the rows as JSON here.")
    parser.add_argument(
        "--threads", type=int, default=None, help="Torch CPU threads (default: torch's, one per core)."
    )
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" not in devices:
        print("no CUDA GPU found: skipping the GPU measurement (CPU only)", flush=True)
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    rows = []
    for device in reversed(devices):  # GPU first: the CPU run patches CUDA detection away
        for kind in args.kinds:
            row = measure(args, kind, device)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

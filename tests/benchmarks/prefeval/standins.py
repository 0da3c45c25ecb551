"""Stand-in files in the official PrefEval layout (our own placeholder texts, never the real ones)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from personalign.benchmarks.prefeval import protocol
from personalign.benchmarks.prefeval.data import FIXTURE
from personalign.fixtures import fixture_path

PAPER_FILES = {
    "config.yaml": "system_prompt: 'STAND-IN SYSTEM'\nmax_gen_tokens: 40\nmax_mcq_tokens: 6\n",
    "utils/common_utils.py": ('COT_PROMPT = """STAND-IN COT. """\nREMINDER = " STAND-IN REMINDER."\n'),
    "utils/explicit_utils.py": (
        "def get_question_prompt(question, max_tokens, remind, cot):\n"
        "    if remind:\n"
        "        question = question + REMINDER\n"
        '    question += f" [STAND-IN LIMIT {max_tokens}]"\n'
        "    return question\n\n\n"
        "def convert_top_k_sentences_to_msg(top_k_sentences):\n"
        '    msg = ("STAND-IN RAG HEAD\\n")\n'
        "    for idx, sentence in enumerate(top_k_sentences, 1):\n"
        '        msg += f"item {idx}: {sentence}\\n"\n'
        '    msg += ("STAND-IN RAG TAIL\\n")\n'
        "    return msg\n"
    ),
    "utils/utils_mcq.py": (
        "def get_mcq_question_format(options):\n"
        "    formatted_options = format_options(options)\n"
        '    mcq_question_format = f"""\\nSTAND-IN MCQ\\n{formatted_options}\\nReply <choice>X</choice>"""\n'
        "    return mcq_question_format\n"
    ),
    "generation_task/baselines_handling.py": (
        "def handle_selfcritic_task(question):\n"
        '    critic_request = "STAND-IN CRITIQUE"\n'
        '    revision_request = f"STAND-IN REVISE: {question}"\n'
    ),
    "generation_task/llm_based_evaluation_errortypes.py": (
        'def main():\n    max_tokens = 30\n    system_prompt = """STAND-IN JUDGE SYSTEM"""\n'
    ),
    "error_type/check_acknowledge.txt": "ACK? Q: {question}\nA: {end_generation}\n",
    "error_type/check_violation.txt": "VIOLATE? P: {preference}\nQ: {question}\nA: {end_generation}\n",
    "error_type/check_hallucination.txt": "HALLUCINATE? P: {preference}\nR: {assistant_restatement}\n",
    "error_type/check_helpful.txt": "HELPFUL? Q: {question}\nA: {end_generation}\n",
}


def write_paper_checkout(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write the stand-in protocol files under `root` and pin their hashes in place of the real ones."""
    pins: dict[str, str] = {}
    for rel, text in PAPER_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        pins[rel] = hashlib.sha256(text.encode()).hexdigest()
    monkeypatch.setattr(protocol, "SOURCE", replace(protocol.SOURCE, files=pins))
    monkeypatch.delenv("PERSONALIGN_PROTOCOL_DIR_PREFEVAL", raising=False)
    return root


def write_data_checkout(root: Path) -> Path:
    """Our fixture's files written out in the official layout: ``root/benchmark_dataset/...``."""
    bundle = json.loads(fixture_path(FIXTURE).read_text(encoding="utf-8"))
    for rel, content in bundle.items():
        path = root / "benchmark_dataset" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=1), encoding="utf-8")
    return root

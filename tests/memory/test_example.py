"""The documented assistant loop runs and personalizes a later conversation from an earlier one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_example(tmp_path: Path, *extra: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *sys.path])}
    result = subprocess.run(
        [
            sys.executable, str(ROOT / "examples" / "assistant_loop.py"),
            "--store", str(tmp_path / "m.sqlite"), "--cache", str(tmp_path / "c.sqlite"),
            "--user", "ana", "--model", "scripted/x", "--embedder", "hash",
            *extra,
        ],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_assistant_loop_records_and_personalizes(tmp_path: Path) -> None:
    out = run_example(tmp_path)
    turns = out.split("=== request: ")[1:]
    assert len(turns) == 3
    assert "nothing remembered" in turns[0]
    # the third request names Professor Okafor: the first conversation leads its memory block
    block = turns[2].split("--- memory block:")[1].split("--- assistant:")[0]
    assert "raw counts per transect" in block
    sessions = block.split("### Session ")[1:]
    assert len(sessions) == 2  # both earlier conversations, the Okafor one first
    assert "Professor Ines Okafor about the kelp" in sessions[0]
    assert "Ridgeback journal club" in sessions[1]
    assert "stored sessions for ana: 3" in out
    again = run_example(tmp_path)  # a second run continues the same store
    assert "stored sessions for ana: 6" in again


def test_assistant_loop_with_background_extraction_reports_failures(tmp_path: Path) -> None:
    # the scripted model does not answer the extraction schema: every session's failure is reported
    out = run_example(tmp_path, "--extract")
    assert "extraction: 0 current memories, 3 session(s) failed" in out

"""Unreadable data becomes a clear error naming the file, row and field; skipped files are announced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.hicupid.data import load_hicupid
from personalign.cli import app
from personalign.errors import DataError
from personalign.fixtures import fixture_path

runner = CliRunner()


def _lines(name: str) -> list[str]:
    return [line for line in fixture_path(name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _latin1_line(lines: list[str], index: int) -> bytes:
    """The JSONL lines as bytes, with a Latin-1 "café" (byte 0xE9) in the first string of line `index`."""
    out = [line.encode("utf-8") for line in lines]
    out[index] = out[index].replace(b'": "', b'": "caf\xe9 ', 1)
    return b"\n".join(out) + b"\n"


def test_non_utf8_cupid_jsonl_names_file_row_and_line(tmp_path: Path) -> None:
    path = tmp_path / "cupid.jsonl"
    path.write_bytes(_latin1_line(_lines("cupid_sample.jsonl"), 3))
    with pytest.raises(DataError) as info:
        load_cupid(path)
    assert info.value.source == str(path) and info.value.row == 3
    assert "line 4" in str(info.value) and "UTF-8" in str(info.value)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert str(path) in result.output and "line 4" in result.output


def test_non_utf8_json_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "cupid.json"
    rows = [json.loads(line) for line in _lines("cupid_sample.jsonl")]
    path.write_bytes(json.dumps(rows, ensure_ascii=False).encode("utf-8").replace(b"The", b"Th\xe9", 1))
    with pytest.raises(DataError, match="not UTF-8") as info:
        load_cupid(path)
    assert str(path) in str(info.value)


def test_non_utf8_benchpres_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "benchpres.jsonl"
    path.write_bytes(_latin1_line(_lines("benchpres_sample.jsonl"), 1))
    result = runner.invoke(app, ["validate", "-b", "benchpres", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert str(path) in " ".join(result.output.split()) and "row 1" in result.output
    with pytest.raises(DataError, match="not UTF-8"):
        load_benchpres(path)


def test_non_utf8_hicupid_dialogue_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "dialogue.jsonl").write_bytes(_latin1_line(_lines("hicupid_dialogue.jsonl"), 5))
    (tmp_path / "qa.jsonl").write_text("\n".join(_lines("hicupid_qa.jsonl")) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="not UTF-8") as info:
        load_hicupid(tmp_path)
    assert info.value.source == str(tmp_path / "dialogue.jsonl") and info.value.row == 5


def test_a_folder_source_warns_about_the_files_it_skips(tmp_path: Path) -> None:
    folder = tmp_path / "instances"
    folder.mkdir()
    for n, line in enumerate(_lines("cupid_sample.jsonl")):
        (folder / f"{n:03d}.json").write_text(line, encoding="utf-8")
    (folder / "README.txt").write_text("notes", encoding="utf-8")
    (folder / "extra.jsonl").write_text("{}", encoding="utf-8")
    with pytest.warns(
        UserWarning, match=r"skipping 2 file\(s\) that are not \.json: README\.txt, extra\.jsonl"
    ):
        loaded = load_cupid(folder)
    assert len(loaded.instances) == len(_lines("cupid_sample.jsonl"))


def test_hicupid_duplicate_turn_row_is_a_data_error(tmp_path: Path) -> None:
    dialogue: list[dict[str, Any]] = [json.loads(line) for line in _lines("hicupid_dialogue.jsonl")]
    dialogue.insert(2, dict(dialogue[1]))  # row 1 again, right after it
    (tmp_path / "dialogue.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in dialogue), encoding="utf-8"
    )
    (tmp_path / "qa.jsonl").write_text("\n".join(_lines("hicupid_qa.jsonl")) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_hicupid(tmp_path)
    error = info.value
    assert (error.source, error.row, error.field) == (str(tmp_path / "dialogue.jsonl"), 2, "user")
    assert "duplicate turn" in str(error) and "row 1" in str(error)

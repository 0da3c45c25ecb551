"""PrefEval loader: the bundled fixture, a checkout in the official layout, one topic file, errors."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from personalign.benchmarks.prefeval import data as pdata
from personalign.benchmarks.prefeval.data import distractor_turns, load_prefeval
from personalign.benchmarks.prefeval.schema import ChoiceRow, ExplicitRow, PersonaRow
from personalign.errors import ConfigError, DataError
from personalign.protocols.upstream import ProtocolError
from tests.benchmarks.prefeval.standins import write_data_checkout


def test_fixture_has_every_form_topic_and_mcq_options() -> None:
    loaded = load_prefeval()
    assert loaded.source == "fixture:prefeval_sample.json" and loaded.sha256
    assert len(loaded.rows) == 12
    assert {r.form for r in loaded.rows} == {"explicit", "choice", "persona"}
    assert {r.topic for r in loaded.rows} == {"travel_hotel", "lifestyle_dietary"}
    assert all(r.mcq is not None and len(r.mcq.classification_task_options) == 4 for r in loaded.rows)
    assert len(loaded.distractors) == 14 and loaded.distractors[0].role == "user"
    ids = [r.id for r in loaded.rows]
    assert len(set(ids)) == 12 and "persona/travel_hotel/1" in ids
    by_id = {r.id: r for r in loaded.rows}
    assert isinstance(by_id["explicit/travel_hotel/0"].row, ExplicitRow)
    choice = by_id["choice/travel_hotel/0"].row
    assert isinstance(choice, ChoiceRow) and choice.aligned_op == choice.options[0]
    assert isinstance(by_id["persona/lifestyle_dietary/0"].row, PersonaRow)


def test_forms_and_topics_filter_and_distractor_turns() -> None:
    loaded = load_prefeval(forms=["persona"], topics=["travel_hotel"], need_mcq=False)
    assert [r.id for r in loaded.rows] == ["persona/travel_hotel/0", "persona/travel_hotel/1"]
    assert all(r.mcq is None for r in loaded.rows)
    two = distractor_turns(loaded.distractors, 2)
    assert [m.role for m in two] == ["user", "assistant", "user", "assistant"]
    assert distractor_turns(loaded.distractors, 0) == []
    with pytest.raises(ConfigError, match=r"8 inter turns need 16 distractor messages"):
        distractor_turns(loaded.distractors, 8)


def test_checkout_directory_dataset_dir_and_single_topic_file(tmp_path: Path) -> None:
    root = write_data_checkout(tmp_path / "PrefEval")
    fixture = load_prefeval()
    from_root = load_prefeval(root)
    from_dataset = load_prefeval(root / "benchmark_dataset")
    assert [r.id for r in from_root.rows] == [r.id for r in fixture.rows]
    assert [r.row for r in from_dataset.rows] == [r.row for r in fixture.rows]
    assert from_root.distractors == fixture.distractors
    assert from_root.sha256 == from_dataset.sha256 and set(from_root.files) >= {"filtered_inter_turns.json"}

    topic_file = (
        root / "benchmark_dataset" / "implicit_preference" / "choice-based" / "lifestyle_dietary.json"
    )
    single = load_prefeval(topic_file, need_mcq=True)
    assert [r.id for r in single.rows] == ["choice/lifestyle_dietary/0", "choice/lifestyle_dietary/1"]
    assert single.rows[0].mcq is not None and len(single.distractors) == 14


def test_a_bad_field_names_file_row_and_field(tmp_path: Path) -> None:
    root = write_data_checkout(tmp_path)
    path = root / "benchmark_dataset" / "explicit_preference" / "travel_hotel.json"
    rows = json.loads(path.read_text())
    rows[1]["question"] = ""
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError) as caught:
        load_prefeval(root)
    assert caught.value.source == str(path) and caught.value.row == 1 and caught.value.field == "question"

    rows[1]["question"] = "ok?"
    rows[0]["stray"] = 1
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"row 0, field 'stray': unexpected field"):
        load_prefeval(root)


def test_persona_turns_must_be_consecutive(tmp_path: Path) -> None:
    root = write_data_checkout(tmp_path)
    path = root / "benchmark_dataset" / "implicit_preference" / "persona-driven" / "travel_hotel.json"
    rows = json.loads(path.read_text())
    rows[0]["conversation"]["5"] = rows[0]["conversation"].pop("1")
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"row 0, field 'conversation': .*turn keys must be 0, 1, 2"):
        load_prefeval(root)


def test_distractors_must_alternate_and_mcq_must_match(tmp_path: Path) -> None:
    root = write_data_checkout(tmp_path)
    turns = root / "benchmark_dataset" / "filtered_inter_turns.json"
    conversations = json.loads(turns.read_text())
    conversations[1]["conversation"][1]["role"] = "user"
    turns.write_text(json.dumps(conversations))
    with pytest.raises(DataError, match=r"row 1, field 'conversation.1.role': expected assistant"):
        load_prefeval(root)
    assert load_prefeval(root, need_distractors=False).distractors == ()

    (root / "benchmark_dataset" / "mcq_options" / "travel_hotel.json").write_text("[]")
    with pytest.raises(DataError, match=r"0 MCQ rows for 2 rows"):
        load_prefeval(root, need_distractors=False)
    (root / "benchmark_dataset" / "mcq_options" / "travel_hotel.json").unlink()
    with pytest.raises(DataError, match=r"mcq_options/travel_hotel.json: file not found"):
        load_prefeval(root, need_mcq=True, need_distractors=False)


def test_unknown_topic_missing_file_and_not_json(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown topic 'travel_moon'"):
        load_prefeval(topics=["travel_moon"])
    with pytest.raises(DataError, match=r"explicit_preference/shop_home.json: file not found"):
        load_prefeval(topics=["shop_home"])
    root = write_data_checkout(tmp_path)
    (root / "benchmark_dataset" / "explicit_preference" / "travel_hotel.json").write_text("{not json")
    with pytest.raises(DataError, match=r"travel_hotel.json: not valid JSON"):
        load_prefeval(root)
    stray = tmp_path / "elsewhere" / "travel_hotel.json"
    stray.parent.mkdir()
    stray.write_text("[]")
    with pytest.raises(DataError, match="not in an official PrefEval folder"):
        load_prefeval(stray)


def test_upstream_download_is_pinned_and_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network: a mock transport serves the files; bytes that differ from the pin are refused."""
    monkeypatch.setenv("PERSONALIGN_CACHE_DIR", str(tmp_path / "cache"))
    urls: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        urls.append(str(request.url))
        return httpx.Response(200, content=b"[]")

    client = httpx.Client(transport=httpx.MockTransport(serve))
    with pytest.raises(ProtocolError, match=r"has sha256 .* expected .*; not cached"):
        load_prefeval("upstream", client=client)
    assert urls[0].startswith(
        "https://raw.githubusercontent.com/amazon-science/PrefEval/50795054b5ff5f418d2b768a331d71e480f93331/"
        "benchmark_dataset/"
    )
    assert not list((tmp_path / "cache").rglob("*.json"))  # nothing unverified was written
    assert len(pdata.DATA_SOURCE.files) == 81  # 4 folders x 20 topics + the distractors


def test_mcq_rows_must_match_their_rows_and_the_curation_mark_is_accepted(tmp_path: Path) -> None:
    root = write_data_checkout(tmp_path)
    persona = root / "benchmark_dataset" / "implicit_preference" / "persona-driven" / "travel_hotel.json"
    rows = json.loads(persona.read_text())
    rows[0]["fix"] = True  # present on some official persona rows
    persona.write_text(json.dumps(rows))
    assert load_prefeval(root).rows  # accepted
    mcq = root / "benchmark_dataset" / "mcq_options" / "travel_hotel.json"
    options = json.loads(mcq.read_text())
    options[1]["question"] = "Something else?"
    mcq.write_text(json.dumps(options))
    with pytest.raises(DataError, match=r"row 1, field 'question': differs from row 1 of .*mcq_options"):
        load_prefeval(root)
    assert load_prefeval(root, need_mcq=False).rows[1].mcq is None

"""The CUPID loader: the bundled fixture's structure, file formats, and errors that say where."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from personalign.benchmarks.cupid.build import PersonaJourney, PlannedSession, build_instances
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.schema import INSTANCE_TYPES, CupidInstance
from personalign.errors import ConfigError, DataError
from personalign.fixtures import fixture_path
from personalign.types import Message

FIXTURE_ROWS: list[dict[str, Any]] = [
    json.loads(line)
    for line in fixture_path("cupid_sample.jsonl").read_text(encoding="utf-8").splitlines()
    if line.strip()
]


def rows() -> list[dict[str, Any]]:
    return copy.deepcopy(FIXTURE_ROWS)


def by_persona() -> dict[str, dict[str, CupidInstance]]:
    grouped: dict[str, dict[str, CupidInstance]] = {}
    for instance in load_cupid("fixture").instances:
        grouped.setdefault(instance.persona_id, {})[instance.instance_type] = instance
    return grouped


def factors(instance: CupidInstance) -> set[str]:
    return {s.context_factor for s in instance.prior_interactions}


# --- the fixture --------------------------------------------------------------------------------


def test_fixture_counts_and_ids() -> None:
    loaded = load_cupid("fixture")
    instances = loaded.instances
    assert len(instances) == 18
    assert loaded.source == "fixture:cupid_sample.jsonl"
    assert loaded.sha256 is not None and len(loaded.sha256) == 64
    ids = [i.id for i in instances]
    assert len(set(ids)) == 18
    assert all(i.id == f"{i.persona_id}#{i.instance_type}" for i in instances)
    grouped = by_persona()
    assert len(grouped) == 6
    for persona_id, types in grouped.items():
        assert set(types) == set(INSTANCE_TYPES), persona_id
        head, _, occupation = persona_id.partition("+")
        assert head.isdigit() and occupation


def test_fixture_instances_are_well_formed() -> None:
    for instance in load_cupid("fixture").instances:
        assert len(instance.prior_interactions) == 8, instance.id
        assert 2 <= len(instance.current_checklist) <= 4, instance.id
        for k, session in enumerate(instance.prior_interactions):
            assert session.dialogue[0].role == "user", (instance.id, k)
            assert {m.role for m in session.dialogue} <= {"user", "assistant"}
            assert all(m.content.strip() for m in session.dialogue)


def test_fixture_types_follow_the_cupid_construction() -> None:
    for persona_id, types in by_persona().items():
        consistent, contrastive, changing = (types[t] for t in ("consistent", "contrastive", "changing"))
        current = consistent.current_context_factor
        original = consistent.current_contextual_preference
        changed = changing.current_contextual_preference

        # one request and one current factor per persona
        for other in (contrastive, changing):
            assert other.current_request == consistent.current_request, persona_id
            assert other.current_context_factor == current, persona_id

        # consistent and contrastive share the gold; changing has its own
        assert contrastive.current_contextual_preference == original
        assert contrastive.current_checklist == consistent.current_checklist
        assert changed != original
        assert changing.current_checklist != consistent.current_checklist

        # contrastive adds 1-2 sessions of a twin factor B (not the current factor), absent elsewhere
        twin = factors(contrastive) - factors(consistent)
        assert len(twin) == 1, persona_id
        (b_factor,) = twin
        assert b_factor != current
        assert b_factor not in factors(changing)
        assert 1 <= sum(s.context_factor == b_factor for s in contrastive.prior_interactions) <= 2

        # the changed preference appears only in the changing instance, after two original sessions
        for instance in (consistent, contrastive):
            assert all(s.contextual_preference != changed for s in instance.prior_interactions)
        same = [s.contextual_preference for s in changing.same_factor_sessions()]
        assert same == [original, original, changed, changed], persona_id

        # the relevant sessions
        assert [len(i.same_factor_sessions()) for i in (consistent, contrastive, changing)] == [2, 2, 4]
        for instance in (consistent, contrastive, changing):
            oracle = instance.oracle_sessions()
            gold = instance.current_contextual_preference
            assert len(oracle) == 2, instance.id
            assert all(s.contextual_preference == gold for s in oracle)
            assert oracle == tuple(s for s in instance.prior_interactions if s.contextual_preference == gold)
            assert all(s.context_factor == current for s in oracle)


# --- file formats -------------------------------------------------------------------------------


def fixture_instances() -> list[CupidInstance]:
    return load_cupid("fixture").instances


def test_round_trip_json_list(tmp_path: Path) -> None:
    path = tmp_path / "cupid.json"
    path.write_text(json.dumps(rows()), encoding="utf-8")
    loaded = load_cupid(path)
    assert loaded.instances == fixture_instances()
    assert loaded.source == str(path)
    assert loaded.sha256 is not None


def test_round_trip_single_json_object(tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(rows()[4]), encoding="utf-8")
    assert load_cupid(path).instances == [fixture_instances()[4]]


def test_round_trip_jsonl_with_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "cupid.jsonl"
    lines = [json.dumps(r) for r in rows()]
    path.write_text("\n".join(lines[:5]) + "\n\n" + "\n".join(lines[5:]) + "\n", encoding="utf-8")
    assert load_cupid(str(path)).instances == fixture_instances()


def test_round_trip_parquet(tmp_path: Path) -> None:
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows()), path)
    assert load_cupid(path).instances == fixture_instances()


def test_round_trip_directory_of_json_files(tmp_path: Path) -> None:
    folder = tmp_path / "instances"
    folder.mkdir()
    for row in rows():
        name = f"{row['persona_id']}+{row['instance_type']}.json"
        (folder / name).write_text(json.dumps(row), encoding="utf-8")
    (folder / "README.txt").write_text("not an instance", encoding="utf-8")
    with pytest.warns(UserWarning, match="README.txt"):  # skipped, and said so
        loaded = load_cupid(folder)
    assert sorted(i.id for i in loaded.instances) == sorted(i.id for i in fixture_instances())
    assert set(loaded.instances) == set(fixture_instances())


# --- broken files -------------------------------------------------------------------------------


def write_jsonl(path: Path, data: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    return path


def load_error(path: Path) -> DataError:
    with pytest.raises(DataError) as info:
        load_cupid(path)
    assert str(path) in str(info.value)
    return info.value


def test_missing_field_names_file_row_and_field(tmp_path: Path) -> None:
    data = rows()
    del data[3]["current_checklist"]
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert (error.row, error.field) == (3, "current_checklist")
    assert "row 3" in str(error)
    assert "current_checklist" in str(error)


def test_wrong_instance_type(tmp_path: Path) -> None:
    data = rows()
    data[5]["instance_type"] = "inconsistent"
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert (error.row, error.field) == (5, "instance_type")
    assert "row 5" in str(error) and "instance_type" in str(error)


def test_bad_nested_role_names_the_nested_field(tmp_path: Path) -> None:
    data = rows()
    data[7]["prior_interactions"][2]["dialogue"][1]["role"] = "robot"
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert error.row == 7
    assert error.field == "prior_interactions[2].dialogue[1].role"
    assert "row 7" in str(error) and "prior_interactions[2]" in str(error)


def test_system_message_in_a_dialogue_rejected(tmp_path: Path) -> None:
    data = rows()
    data[1]["prior_interactions"][4]["dialogue"][0]["role"] = "system"
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert error.row == 1
    assert error.field is not None and error.field.startswith("prior_interactions[4].dialogue")


def test_empty_checklist_rejected(tmp_path: Path) -> None:
    data = rows()
    data[0]["current_checklist"] = []
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert (error.row, error.field) == (0, "current_checklist")


def test_extra_unknown_column(tmp_path: Path) -> None:
    data = rows()
    data[2]["notes"] = "added by hand"
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert (error.row, error.field) == (2, "notes")
    assert "row 2" in str(error) and "notes" in str(error)


def test_duplicate_instance_id(tmp_path: Path) -> None:
    data = rows()
    data.append(copy.deepcopy(data[4]))
    error = load_error(write_jsonl(tmp_path / "broken.jsonl", data))
    assert error.row == 18
    assert error.field == "persona_id"
    assert "row 18" in str(error)
    assert "row 4" in str(error)  # where it was first seen
    assert FIXTURE_ROWS[4]["persona_id"] in str(error)


def test_jsonl_line_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    lines = [json.dumps(r) for r in rows()]
    # a blank line, then two good records, then garbage: file line 4, record row 2
    path.write_text("\n" + lines[0] + "\n" + lines[1] + "\n{not json\n" + "\n".join(lines[2:]) + "\n")
    error = load_error(path)
    assert error.row == 2
    assert "row 2" in str(error)
    assert "line 4" in str(error)


def test_jsonl_row_that_is_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(FIXTURE_ROWS[0]) + "\n[1, 2]\n", encoding="utf-8")
    error = load_error(path)
    assert error.row == 1
    assert "object" in str(error)


def test_json_file_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[{"persona_id": ', encoding="utf-8")
    load_error(path)


def test_bad_file_inside_a_directory_names_that_file(tmp_path: Path) -> None:
    folder = tmp_path / "instances"
    folder.mkdir()
    data = rows()
    for k, row in enumerate(data[:3]):
        (folder / f"{k:02d}.json").write_text(json.dumps(row), encoding="utf-8")
    del data[3]["current_request"]
    (folder / "03.json").write_text(json.dumps(data[3]), encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_cupid(folder)
    assert str(folder / "03.json") in str(info.value)
    assert info.value.field == "current_request"


def test_unsupported_suffix(tmp_path: Path) -> None:
    path = tmp_path / "cupid.csv"
    path.write_text("persona_id,instance_type\n", encoding="utf-8")
    error = load_error(path)
    assert ".csv" in str(error)


def test_missing_file(tmp_path: Path) -> None:
    error = load_error(tmp_path / "nowhere.jsonl")
    assert "no such file" in str(error)


def test_empty_directory(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    error = load_error(folder)
    assert ".json" in str(error)


def test_empty_file_has_no_instances(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text("[]", encoding="utf-8")
    error = load_error(path)
    assert "no instances" in str(error)


def test_corrupt_parquet(tmp_path: Path) -> None:
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    load_error(path)


# --- cupid_build --------------------------------------------------------------------------------

A_PREF = "Updates for Dr Lee should lead with raw counts."
A_CHANGED = "Updates for Dr Lee should open with a one-line summary."
B_PREF = "Messages to Captain Reyes should explain the plan step by step."


def planned(plan: str, factor: str, preference: str, first_role: str = "user") -> PlannedSession:
    second_role = "assistant" if first_role == "user" else "user"
    return PlannedSession(
        context_factor=factor,
        contextual_preference=preference,
        checklist=(f"Does it follow: {preference}",),
        plan=plan,  # type: ignore[arg-type]
        dialogue=(
            Message(role=first_role, content=f"Help me with {factor}."),  # type: ignore[arg-type]
            Message(role=second_role, content="Sure."),  # type: ignore[arg-type]
        ),
    )


def other(k: int) -> PlannedSession:
    return planned("other", f"factor {k}", f"Preference {k} for factor {k}.")


def valid_sessions() -> list[PlannedSession]:
    a = planned("A", "Dr Lee", A_PREF)
    changed = planned("A_changed", "Dr Lee", A_CHANGED)
    b = planned("B", "Captain Reyes", B_PREF)
    return [other(1), a, other(2), b, a, other(3), changed, other(4), b, changed, other(5), other(6), changed]


def journey(sessions: list[PlannedSession]) -> PersonaJourney:
    return PersonaJourney(persona_id="7+harbour_pilot", sessions=tuple(sessions))


def test_build_instances_valid_plan() -> None:
    instances = {i.instance_type: i for i in build_instances(journey(valid_sessions()), seed=1)}
    assert set(instances) == set(INSTANCE_TYPES)
    for instance in instances.values():
        assert len(instance.prior_interactions) == 8
        assert instance.current_request == "Help me with Dr Lee."
        assert instance.current_context_factor == "Dr Lee"
    assert instances["consistent"].current_contextual_preference == A_PREF
    assert instances["contrastive"].current_contextual_preference == A_PREF
    assert instances["changing"].current_contextual_preference == A_CHANGED
    assert "Captain Reyes" in factors(instances["contrastive"])
    assert "Captain Reyes" not in factors(instances["consistent"]) | factors(instances["changing"])
    assert len(instances["changing"].same_factor_sessions()) == 4
    assert len(instances["consistent"].oracle_sessions()) == 2
    assert len(instances["changing"].oracle_sessions()) == 2


def test_build_instances_is_deterministic_for_a_seed() -> None:
    first = build_instances(journey(valid_sessions()), seed=3)
    second = build_instances(journey(valid_sessions()), seed=3)
    assert first == second


def replace(index: int, session: PlannedSession, *more: tuple[int, PlannedSession]) -> list[PlannedSession]:
    sessions = valid_sessions()
    for k, s in ((index, session), *more):
        sessions[k] = s
    return sessions


@pytest.mark.parametrize(
    ("sessions", "reason"),
    [
        ([*valid_sessions()[:-1], planned("A", "Dr Lee", A_PREF)], "last session"),
        ([*valid_sessions()[:-1], planned("B", "Dr Lee", A_CHANGED)], "last session"),
        (replace(0, planned("A", "Dr Lee", A_PREF)), "exactly 2 'A'"),
        (replace(1, planned("A_changed", "Dr Lee", A_CHANGED)), "exactly 2 'A'"),
        (replace(3, other(7), (8, other(8))), "'B'"),
        (replace(0, planned("B", "Captain Reyes", B_PREF)), "'B'"),
        (replace(0, planned("other", "Dr Lee", "Something else.")), "reuses the current factor"),
        (replace(1, planned("A", "Dr Li", A_PREF)), "factor"),
        (replace(6, planned("A_changed", "Dr Lee", "A third opinion.")), "current preference"),
        (
            [*valid_sessions()[:-1], planned("A_changed", "Dr Lee", A_CHANGED, first_role="assistant")],
            "user message",
        ),
        (valid_sessions()[-4:], "at least 5"),
    ],
)
def test_build_instances_rejects_bad_plans(sessions: list[PlannedSession], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        build_instances(journey(sessions))


def test_build_instances_rejects_changed_before_original() -> None:
    sessions = valid_sessions()
    a, changed = sessions[1], sessions[6]
    sessions[1], sessions[6] = changed, a
    with pytest.raises(ValueError, match="precede"):
        build_instances(journey(sessions))


def test_sources_are_described_without_parsing_and_the_hub_needs_its_extra(tmp_path: Path) -> None:
    import importlib.util

    from personalign.benchmarks.benchpres.data import describe_source as describe_benchpres
    from personalign.benchmarks.benchpres.data import load_benchpres
    from personalign.benchmarks.cupid.data import describe_source
    from personalign.data.files import file_sha256

    source, sha = describe_source("fixture")
    assert source == "fixture:cupid_sample.jsonl" and sha == load_cupid("fixture").sha256
    assert describe_benchpres("fixture")[1] == load_benchpres("fixture").sha256
    assert describe_source("hf:someone/else:test") == ("hf:someone/else:test", None)
    local = tmp_path / "x.jsonl"
    local.write_text("not even parsed\n")
    assert describe_source(local) == (str(local), file_sha256(local))
    with pytest.raises(DataError, match="no such file or directory"):
        describe_source(tmp_path / "missing.jsonl")
    if importlib.util.find_spec("datasets") is None:  # offline CI: the hub path names its extra
        with pytest.raises(ConfigError, match=r"personalign\[hf\]"):
            load_cupid("hf")
        with pytest.raises(ConfigError, match=r"personalign\[hf\]"):
            load_benchpres("hf:sangyon/BenchPreS")

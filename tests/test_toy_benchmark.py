"""The example third-party benchmark (examples/toy_benchmark, docs/write-a-benchmark.md), found through
its entry point as an installed package would be, run end to end on the scripted model through the
public API: run, resume, load, rescore, report, validate, and its data errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import personalign
from personalign import registry
from personalign.errors import DataError

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "toy_benchmark"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The example on sys.path with a dist-info built from its pyproject.toml: what `pip install`
    leaves behind, as far as entry points are concerned."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    site = tmp_path / "site"
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n", encoding="utf-8"
    )
    points = "".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items())
        for group, entries in project["entry-points"].items()
    )
    (info / "entry_points.txt").write_text(points, encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    registry.get.cache_clear()
    yield
    registry.get.cache_clear()
    for name in [m for m in sys.modules if m == "toy_benchmark" or m.startswith("toy_benchmark.")]:
        del sys.modules[name]


def test_the_entry_point_registers_the_benchmark(installed: None) -> None:
    assert "colour" in registry.names() and "colour" not in registry.BUILTIN
    assert "colour" in personalign.list_benchmarks()
    spec = registry.get("colour")
    assert spec.name == "colour" and [r.name for r in spec.roles] == ["subject", "judge"]
    assert isinstance(spec, personalign.BenchmarkSpec)


def test_run_resume_rescore_report_end_to_end(installed: None, tmp_path: Path) -> None:
    cache = tmp_path / "c.sqlite"
    common = {"model": "scripted/s", "judge": "scripted/j", "run_dir": tmp_path / "run", "cache": cache}
    first = personalign.run("colour", limit=2, **common)  # type: ignore[arg-type]
    assert first.outcome.status == "complete" and first.outcome.evaluated == 2
    full = personalign.run("colour", **common)  # type: ignore[arg-type]
    assert full.outcome.evaluated == 4 and full.outcome.skipped == 2  # resumed: only the rest ran
    run = personalign.load_run(tmp_path / "run")
    assert run.benchmark == "colour" and run.manifest.schema_version == 1
    assert set(run.manifest.prompts or {}) == {"colour/answer", "colour/judge"}
    assert run.manifest.data is not None and run.manifest.data.source == "fixture:colours.jsonl"
    assert len(run.records) == 6 and all(r.steps["answer"].role == "subject" for r in run.records.values())
    assert run.summary is not None and run.summary.status == "complete"
    metrics = run.summary.metrics
    assert run.summary.n_instances == 6 and metrics["exact"]["all"]["n"] == 6
    assert set(metrics["judged"]["by_kind"]) == {"stated", "changed"}

    rescored = personalign.rescore(tmp_path / "run", judge="scripted/k", cache=cache)
    new = personalign.load_run(rescored.run_dir.path)
    assert new.summary is not None and new.summary.usage is not None
    per_model = new.summary.usage["per_model"]
    assert per_model["scripted/k"]["calls"] == 6 and per_model.get("scripted/s", {"calls": 0})["calls"] == 0
    assert all(r.steps["judge"].model == "scripted/k" for r in new.records.values())

    spec = registry.get("colour")
    markdown = spec.write_report([tmp_path / "run", rescored.run_dir.path], tmp_path / "report")
    assert "| scripted/s | scripted/j | full | 6 |" in markdown
    assert "| scripted/s | scripted/k | full | 6 |" in markdown
    assert (tmp_path / "report" / "report.md").read_text(encoding="utf-8") == markdown
    assert spec.validate("fixture") == {
        "source": "fixture:colours.jsonl",
        "items": 6,
        "by_kind": {"changed": 3, "stated": 3},
    }


def test_selection_and_a_colour_out_of_the_subjects_sight(installed: None, tmp_path: Path) -> None:
    # The scripted subject echoes the prompt's last 40 words: a colour stated before a long turn is
    # missed, so the metric is measured, not constant.
    filler = " ".join(["Tell me about the weather in spring please"] * 8)
    items = [
        {"id": "near", "kind": "stated", "question": "Which colour?", "colour": "teal",
         "history": [{"role": "user", "content": "My favourite colour is teal."}]},
        {"id": "far", "kind": "stated", "question": "Which colour?", "colour": "amber",
         "history": [{"role": "user", "content": "My favourite colour is amber."},
                     {"role": "user", "content": filler}]},
        {"id": "other", "kind": "changed", "question": "Which colour?", "colour": "navy",
         "history": [{"role": "user", "content": "Now I prefer navy."}]},
    ]  # fmt: skip
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    result = personalign.run(
        "colour", model="scripted/s", judge="scripted/j", data=data, kinds=["stated"], run_dir=tmp_path / "r"
    )
    summary = result.summary
    assert summary["n_instances"] == 2 and summary["selection"] == {"limit": None, "kinds": ["stated"]}
    assert summary["exact"]["all"]["accuracy"] == 0.5 and summary["judged"]["all"]["accuracy"] == 0.5
    records = personalign.load_run(tmp_path / "r").records
    assert records["near"].results["answer"].scores["exact"] is True
    assert records["far"].results["answer"].scores["exact"] is False


def test_bad_data_names_file_row_and_field(installed: None, tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    good = {"id": "a", "kind": "stated", "question": "Q?", "colour": "red",
            "history": [{"role": "user", "content": "I like red."}]}  # fmt: skip
    data.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "kind": "maybe"}) + "\n")
    spec = registry.get("colour")
    with pytest.raises(DataError, match=r"bad\.jsonl, row 1, field 'kind'"):
        spec.validate(data)
    data.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(DataError, match=r"row 1, field 'id': duplicate id 'a'"):
        spec.load(data)

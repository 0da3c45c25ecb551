"""The viewer app over a runs directory: list, compare, filter, paginate, drill down, live reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from personalign.view.app import create_app, flatten_metrics
from personalign.view.runs_index import disagree, instance_type, record_status, scores


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture()
def client(runs: Path) -> TestClient:
    return TestClient(create_app(runs))


def _matching(html: str) -> int:
    marker = 'id="matching">'
    return int(html[html.index(marker) + len(marker) :].split(" ", 1)[0])


def test_lists_every_run_with_its_benchmark_and_status(client: TestClient) -> None:
    html = client.get("/").text
    for run_id in ("cupid/a", "hicupid/a", "benchpres/a"):
        assert f'href="/run/{run_id}"' in html
    assert html.count('<td class="status-complete">complete</td>') == 3


def test_a_run_being_written_shows_its_progress_and_new_lines_appear(runs: Path, client: TestClient) -> None:
    live = runs / "cupid" / "live"
    live.mkdir()
    (live / "manifest.json").write_text((runs / "cupid" / "a" / "manifest.json").read_text())
    records = _lines(runs / "cupid" / "a" / "samples.jsonl")
    _write(live / "samples.jsonl", records[:3])
    with (live / "samples.jsonl").open("a") as handle:
        handle.write(json.dumps(records[3])[:40])  # an unfinished line: still being written
    page = client.get("/run/cupid/live").text
    assert "running or interrupted" in page and _matching(page) == 3
    with (live / "samples.jsonl").open("a") as handle:
        handle.write(json.dumps(records[3])[40:] + "\n" + json.dumps(records[4]) + "\n")
    assert _matching(client.get("/run/cupid/live").text) == 5
    assert "5 / 18" in client.get("/").text


def test_filters_by_type_error_and_disagreement(runs: Path, client: TestClient) -> None:
    base = runs / "cupid" / "a"
    other = runs / "cupid" / "b"
    other.mkdir()
    for name in ("manifest.json", "summary.json"):
        (other / name).write_text((base / name).read_text())
    records = _lines(base / "samples.jsonl")
    changed = json.loads(json.dumps(records))
    changed[0]["results"]["inference"]["scores"]["f1"] = 0.75  # one score differs
    changed[1]["results"]["generation"]["status"] = "error"  # one instance failed
    changed[1]["steps"]["judge"]["status"] = "error"
    changed[1]["steps"]["judge"]["error"] = "unparseable output: no score (raw: maybe)"
    _write(other / "samples.jsonl", changed)

    assert _matching(client.get("/run/cupid/a").text) == 18
    by_type = client.get("/run/cupid/a", params={"type": "changing"}).text
    assert _matching(by_type) == sum(r["meta"]["instance_type"] == "changing" for r in records)
    errors = client.get("/run/cupid/b", params={"error": "1"}).text
    assert _matching(errors) == 1 and changed[1]["instance_id"] in errors
    differing = client.get("/run/cupid/a", params={"compare": "cupid/b", "disagree": "1"}).text
    assert _matching(differing) == 2
    assert changed[0]["instance_id"] in differing and changed[2]["instance_id"] not in differing
    assert "cupid/b" in differing and "column by column" in differing


def test_pages_are_cut_on_the_server(client: TestClient) -> None:
    first = client.get("/run/cupid/a", params={"per_page": "5"}).text
    assert first.count('class="instance-link"') == 5 and "page 1 of 4" in first
    assert 'rel="next" href="?per_page=5&amp;page=2"' in first
    last = client.get("/run/cupid/a", params={"per_page": "5", "page": "4"}).text
    assert last.count('class="instance-link"') == 3 and 'rel="next"' not in last


def test_instance_page_shows_every_step_with_raw_output_parsed_value_and_errors(
    runs: Path, client: TestClient
) -> None:
    samples = runs / "cupid" / "a" / "samples.jsonl"
    records = _lines(samples)
    record = records[0]
    record["steps"]["judge"]["errors"] = ["model call failed: timeout after 120 s"]
    _write(samples, records)
    response = client.get("/instance/cupid/a", params={"id": record["instance_id"]})
    assert response.status_code == 200
    html = response.text
    for name in record["steps"]:
        assert f">{name} <" in html.replace("&gt;", ">")
    assert "model call failed: timeout after 120 s" in html
    infer = record["steps"]["infer"]
    assert infer["raw"][0].split("\n")[0].replace("'", "&#39;") in html
    assert f"{infer['completion_tokens']} out" in html
    assert 'rel="next"' in html and 'rel="prev"' not in html


def test_unknown_run_or_instance_is_a_404(client: TestClient) -> None:
    assert client.get("/run/nope").status_code == 404
    assert client.get("/instance/cupid/a", params={"id": "nope"}).status_code == 404
    assert client.get("/run/cupid/a", params={"compare": "nope"}).status_code == 404


def test_record_helpers() -> None:
    ok = {
        "meta": {"type": "persona"},
        "results": {"qa": {"status": "ok", "scores": {"score": 1.0, "x": "a"}}},
    }
    failed = {"meta": {"domain": "finance"}, "results": {"qa": {"status": "error", "scores": {}}}}
    assert instance_type(ok) == "persona" and instance_type(failed) == "finance"
    assert scores(ok) == {"qa.score": 1.0}
    assert record_status(ok) == "ok" and record_status(failed) == "error"
    assert disagree(ok, failed) and not disagree(ok, ok) and disagree(ok, None)
    other = json.loads(json.dumps(ok))
    other["results"]["qa"]["scores"]["score"] = 0.5
    assert disagree(ok, other)


def test_flatten_metrics_keeps_scalars_and_cis_and_drops_per_instance_maps() -> None:
    summary = {
        "status": "complete",
        "inference": {"all": {"f1": 0.5, "f1_ci": [0.25, 0.75]}, "errors": {"x": "boom"}},
        "usage": {"cost_usd": 0.1, "per_model": {"m": {"calls": 3}}},
    }
    assert flatten_metrics(summary) == {
        "status": "complete",
        "inference.all.f1": 0.5,
        "inference.all.f1_ci": "[0.25, 0.75]",
        "usage.cost_usd": 0.1,
    }


def test_cupid_instance_page_rebuilds_the_messages_each_step_sent(runs: Path, client: TestClient) -> None:
    from personalign.benchmarks.cupid.data import load_cupid

    record = _lines(runs / "cupid" / "a" / "samples.jsonl")[0]
    instance = next(i for i in load_cupid("fixture").instances if i.id == record["instance_id"])
    html = client.get("/instance/cupid/a", params={"id": record["instance_id"]}).text
    assert "Messages rebuilt" in html
    sections = html.split('<section class="step"')[1:]
    by_step = {s.split(">", 2)[2].split(" <", 1)[0].replace("&gt;", ">"): s for s in sections}
    assert set(by_step) == set(record["steps"])
    infer, judge = by_step["infer"], by_step["judge"]
    assert 'class="message"' in infer and instance.current_request.split("\n")[0][:60] in infer.replace(
        "&#39;", "'"
    )
    response = record["steps"]["generate"]["parsed"]
    assert response[:60] in judge.replace("&#39;", "'")  # the judge saw the recorded response


def test_messages_are_not_rebuilt_from_data_that_changed_or_for_other_benchmarks(
    runs: Path, client: TestClient
) -> None:
    manifest_path = runs / "cupid" / "a" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["data"]["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest))
    record = _lines(runs / "cupid" / "a" / "samples.jsonl")[0]
    html = client.get("/instance/cupid/a", params={"id": record["instance_id"]}).text
    assert "changed since the run (sha256 differs)" in html and 'class="message"' not in html
    hicupid = _lines(runs / "hicupid" / "a" / "samples.jsonl")[0]
    html = client.get("/instance/hicupid/a", params={"id": hicupid["instance_id"]}).text
    assert "messages are not rebuilt" in html


def test_view_command_refuses_a_missing_directory(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from personalign.cli import app

    result = CliRunner().invoke(app, ["view", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "not a directory" in result.output


def test_view_command_serves_the_app_on_localhost_by_default(runs: Path, monkeypatch: Any) -> None:
    import uvicorn
    from typer.testing import CliRunner

    from personalign.cli import app

    served: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda asgi, **kw: served.update(app=asgi, **kw))
    result = CliRunner().invoke(app, ["view", str(runs)])
    assert result.exit_code == 0, result.output
    assert served["host"] == "127.0.0.1"
    assert TestClient(served["app"]).get("/run/cupid/a").status_code == 200

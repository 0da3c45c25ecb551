"""`report --html`: one self-contained page whose tables hold the numbers of summary.json."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from typer.testing import CliRunner

from personalign.cli import app
from personalign.report.tables import Cell, Table
from personalign.view.report_html import cell_text, render_report
from tests.view.conftest import read_json


class _Cells(HTMLParser):
    """Collects the text of every `<td data-column=...>` by (table benchmark, row, column)."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str, str, str], str] = {}  # (benchmark, row, column) of the first table
        self.all_cells: list[tuple[str, str, str, str]] = []  # (benchmark, table, column, text)
        self.benchmark = ""
        self.table = ""
        self._key: tuple[str, str, str] | None = None
        self._in_value = False
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for name in ("src", "href"):
            value = a.get(name) or ""
            if tag in ("script", "img", "link", "iframe") and value and not value.startswith(("#", "data:")):
                self.external.append(value)
        if tag == "table" and a.get("data-benchmark"):
            self.benchmark = f"{a['data-benchmark']}"
            self.table = str(a.get("data-table"))
        if tag == "td" and a.get("data-column"):
            self._key = (self.benchmark, str(a["data-row"]), str(a["data-column"]))
        if tag == "span" and a.get("class") == "value" and self._key:
            self._in_value = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._in_value = False
        if tag == "td":
            self._key = None

    def handle_data(self, data: str) -> None:
        if self._in_value and self._key:
            self.cells.setdefault(self._key, data)
            self.all_cells.append((self._key[0], self.table, self._key[2], data))


def _cells(html: str) -> _Cells:
    parser = _Cells()
    parser.feed(html)
    return parser


def _one(cells: dict[tuple[str, str, str], str], benchmark: str, column: str) -> str:
    found = [v for (b, _, c), v in cells.items() if b == benchmark and c == column]
    assert len(found) == 1, (benchmark, column, found)
    return found[0]


def test_tables_hold_the_summary_numbers_of_every_benchmark(runs_root: Path) -> None:
    paths = [runs_root / "cupid" / "a", runs_root / "hicupid" / "a", runs_root / "benchpres" / "a"]
    html = render_report(paths)
    parsed = _cells(html)
    cells = parsed.cells
    cupid = read_json(paths[0] / "summary.json")
    assert _one(cells, "cupid", "All R") == f"{100 * cupid['inference']['all']['recall']:.1f}"
    assert (
        _one(cells, "cupid", "Changing F1") == f"{100 * cupid['inference']['by_type']['changing']['f1']:.1f}"
    )
    assert _one(cells, "cupid", "Consistent") == f"{cupid['generation']['by_type']['consistent']['mean']:.2f}"
    low, high = cupid["inference"]["all"]["recall_ci"]
    assert f"[{100 * low:.1f}, {100 * high:.1f}]" in html
    hicupid = read_json(paths[1] / "summary.json")
    split = hicupid["qa"]["by_split"]["test_1"]
    found = [(t, v) for b, t, c, v in parsed.all_cells if b == "hicupid" and c == "Total"]
    assert found[0] == ("0", f"{100 * split['total']:.1f}")  # Table 3 (test_1) first
    benchpres = read_json(paths[2] / "summary.json")
    assert _one(cells, "benchpres", "MR") == f"{100 * benchpres['all']['mr']:.1f}"


def test_page_is_self_contained_with_one_plot_per_benchmark_and_alt_text(runs_root: Path) -> None:
    paths = [runs_root / "cupid" / "a", runs_root / "hicupid" / "a", runs_root / "benchpres" / "a"]
    html = render_report(paths)
    assert _cells(html).external == []
    without_namespaces = re.sub(r'xmlns(:\w+)?="[^"]*"', "", html)
    assert "http://" not in without_namespaces and "https://" not in without_namespaces
    assert html.count("<svg") == 3
    assert len(re.findall(r'role="img" aria-label="[^"]{40,}"', html)) == 3
    assert html.count('<th scope="col">Model</th>') >= 5  # every results table has column headers


def test_manifests_are_shown_with_secrets_redacted(runs: Path) -> None:
    run = runs / "cupid" / "a"
    manifest = read_json(run / "manifest.json")
    manifest["models"]["subject"]["base_url"] = "http://user:sk-SECRET@host/v1?api_key=sk-OTHER"
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    html = render_report([run])
    assert "sk-SECRET" not in html and "sk-OTHER" not in html
    assert "http://***@host/v1" in html
    assert manifest["identity_hash"] in html
    assert next(iter(manifest["prompts"].values())) in html
    assert manifest["environment"]["packages"]["personalign"] in html


def test_a_benchmark_without_report_tables_is_listed_not_fatal(runs: Path) -> None:
    run = runs / "cupid" / "a"
    manifest = read_json(run / "manifest.json")
    manifest["benchmark"] = "plugin-without-tables"
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    html = render_report([run, runs / "benchpres" / "a"])
    assert "no report tables for &#39;plugin-without-tables&#39;" in html
    assert 'data-benchmark="benchpres"' in html


def test_cell_text_prints_na_dash_and_the_ci_in_the_table_scale() -> None:
    table = Table("t", ["a"], digits=1, scale=100.0)
    assert cell_text(table, None) == ("–", "")
    assert cell_text(table, Cell(None, None, 0)) == ("n/a", "")
    assert cell_text(table, Cell(0.5, (0.25, 0.75), 4)) == ("50.0", "[25.0, 75.0]")


def test_report_command_writes_the_html_file(runs_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "deep" / "report.html"
    result = CliRunner().invoke(
        app, ["report", str(runs_root / "cupid" / "a"), "--out", str(tmp_path / "r"), "--html", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert (tmp_path / "r" / "report.md").is_file()


def test_prefeval_section_has_its_tables_and_the_accuracy_vs_turns_plot(tmp_path: Path) -> None:
    from tests.view.conftest import make_run

    run = make_run("prefeval", tmp_path / "prefeval")
    summary = read_json(run / "summary.json")
    html = render_report([run])
    assert 'data-benchmark="prefeval"' in html and "no report tables" not in html
    assert html.count("<svg") == 1 and "distractor turns" in html
    accuracy = f"{100 * summary['all']['accuracy']:.1f}"
    assert any(b == "prefeval" and text == accuracy for b, _t, _c, text in _cells(html).all_cells)

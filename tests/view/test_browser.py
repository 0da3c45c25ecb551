"""The HTML report and the viewer in a real headless Chromium (system package), driven by Selenium.

Skipped, with the reason, when Chromium, chromedriver or selenium is absent (`.ci/run` installs them).
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from personalign.view.report_html import write_html_report
from tests.view.conftest import read_json

pytestmark = pytest.mark.slow

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium that keeps the page's console log."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("Chromium or chromedriver not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (dev extra)")
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        options.add_argument(flag)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _console_errors(driver: Any) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_report_opens_without_console_errors_and_shows_the_summary_numbers(
    browser: Any, runs_root: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    paths = [runs_root / "cupid" / "a", runs_root / "hicupid" / "a", runs_root / "benchpres" / "a"]
    page = write_html_report(paths, tmp_path / "report.html")
    browser.get(page.as_uri())
    assert _console_errors(browser) == []
    cupid = read_json(paths[0] / "summary.json")
    cell = browser.find_element(
        By.CSS_SELECTOR, 'table[data-benchmark="cupid"] td[data-column="All R"] .value'
    )
    assert cell.text == f"{100 * cupid['inference']['all']['recall']:.1f}"
    benchpres = read_json(paths[2] / "summary.json")
    cell = browser.find_element(
        By.CSS_SELECTOR, 'table[data-benchmark="benchpres"] td[data-column="AAR"] .value'
    )
    assert cell.text == f"{100 * benchpres['all']['aar']:.1f}"
    plots = browser.find_elements(By.CSS_SELECTOR, "figure svg")
    assert len(plots) == 3 and all(p.size["width"] > 300 for p in plots)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def viewer(runs: Path) -> Iterator[str]:
    """The viewer served by uvicorn on a free local port; yields its base URL."""
    import uvicorn

    from personalign.view.app import create_app

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(runs), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the viewer did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_viewer_list_filter_and_drill_down(browser: Any, viewer: str, runs: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def after_click(condition: Any) -> None:
        """A click starts a navigation and returns at once: wait for the new page (at most 20 s;
        a timeout fails the test) before looking at it, not for whatever page is still shown."""
        WebDriverWait(browser, 20).until(
            lambda d: condition(d) and d.execute_script("return document.readyState") == "complete"
        )

    browser.get(viewer + "/")
    browser.find_element(By.LINK_TEXT, "cupid/a").click()
    after_click(lambda d: d.find_element(By.TAG_NAME, "h1").text == "cupid · cupid/a")
    Select(browser.find_element(By.ID, "filter-type")).select_by_value("changing")
    browser.find_element(By.ID, "apply").click()
    after_click(lambda d: "type=changing" in d.current_url)
    records = [r for r in map(_json, (runs / "cupid/a/samples.jsonl").read_text().splitlines())]
    changing = [r["instance_id"] for r in records if r["meta"]["instance_type"] == "changing"]
    links = browser.find_elements(By.CSS_SELECTOR, "a.instance-link")
    assert [a.text for a in links] == changing
    links[0].click()
    after_click(lambda d: d.find_elements(By.ID, "instance-id"))
    assert browser.find_element(By.ID, "instance-id").text == changing[0]
    raw = browser.find_elements(By.CSS_SELECTOR, "pre.raw")
    first = next(r for r in records if r["instance_id"] == changing[0])
    assert raw[0].text.splitlines()[0] == first["steps"]["infer"]["raw"][0].splitlines()[0]
    deep_link = browser.current_url
    browser.get(viewer + "/")
    browser.get(deep_link)  # the instance page is a shareable URL
    assert browser.find_element(By.ID, "instance-id").text == changing[0]
    assert _console_errors(browser) == []


def _json(line: str) -> dict[str, Any]:
    import json

    return json.loads(line)  # type: ignore[no-any-return]

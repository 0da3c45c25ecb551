"""Speed and size of the HTML report and the run viewer on a 756-instance CUPID run.

    PYTHONPATH=src .venv/bin/python benchmarks/view_speed.py [--instances 756] [--screenshots docs/img]

Builds a CUPID run (both tasks) with the scripted models on `--instances` distinct instances (the
fixture's, made unique as benchmarks/cupid_throughput.py does), then prints:
- the size of its `report --html` page (target < 5 MB) and the time headless Chromium takes to
  open it (navigation timing, load event end; median of 5; target < 2 s);
- the viewer's instance page latency over HTTP on that run (median and p95 over every
  `--step`-th instance, after one warm-up request; target < 100 ms), and its run page (first page).
With `--screenshots DIR` it also writes report.png (that run plus fixture HiCUPID and BenchPreS
runs), viewer-runs.png, viewer-run.png and viewer-instance.png. Needs chromium and chromedriver.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from cupid_throughput import generate_instances  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from personalign.cli import app  # noqa: E402
from personalign.view.app import create_app  # noqa: E402
from personalign.view.report_html import write_html_report  # noqa: E402


def make_run(benchmark: str, run_dir: Path, *extra: str) -> Path:
    """`personalign run <benchmark>` with the scripted models into `run_dir`."""
    args = ["run", benchmark, "--model", "scripted/a", "--judge", "scripted/b", "--run-dir", str(run_dir)]
    result = CliRunner().invoke(app, [*args, "--no-cache", "--no-progress", *extra])
    if result.exit_code != 0:
        raise SystemExit(f"{benchmark} run failed:\n{result.output}")
    return run_dir


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """Headless Chromium from the system's packages."""
    from selenium import webdriver

    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver_path is None:
        raise SystemExit("chromium and chromedriver are needed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.binary_location = binary
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """The viewer on a free local port, in a thread; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(create_app(root), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


def open_time(driver: Any, page: Path, repeats: int = 5) -> float:
    """Median seconds from navigation start to the load event's end."""
    times = []
    for _ in range(repeats):
        driver.get("about:blank")
        driver.get(page.as_uri())
        ms = driver.execute_script(
            "const e = performance.getEntriesByType('navigation')[0]; return e.loadEventEnd - e.startTime;"
        )
        times.append(float(ms) / 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--instances", type=int, default=756)
    parser.add_argument("--step", type=int, default=7, help="Time every STEP-th instance page.")
    parser.add_argument("--screenshots", type=Path, default=None)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        data = Path(tmp) / "instances.jsonl"
        generate_instances(args.instances, data)
        started = time.perf_counter()
        run = make_run(
            "cupid", root / "cupid" / f"scripted-{args.instances}", "--task", "both", "--data", str(data)
        )
        print(f"built a {args.instances}-instance CUPID run in {time.perf_counter() - started:.1f} s")

        report = write_html_report([run], Path(tmp) / "report.html")
        size = report.stat().st_size
        with chromium() as driver:
            opened = open_time(driver, report)
        print(f"HTML report: {size / 1e6:.3f} MB (target < 5 MB), opens in {opened:.3f} s (target < 2 s)")

        ids = [
            line.split('"instance_id":"', 1)[1].split('"', 1)[0] for line in (run / "samples.jsonl").open()
        ]
        with serve(root) as base, httpx.Client(base_url=base) as client:
            run_id = f"cupid/{run.name}"
            client.get(f"/instance/{run_id}", params={"id": ids[0]})  # warm-up: the first read of the run
            latencies = []
            for instance_id in ids[:: args.step]:
                t = time.perf_counter()
                response = client.get(f"/instance/{run_id}", params={"id": instance_id})
                latencies.append(time.perf_counter() - t)
                response.raise_for_status()
            latencies.sort()
            p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
            print(
                f"viewer instance page: median {1000 * statistics.median(latencies):.1f} ms, p95 "
                f"{1000 * p95:.1f} ms over {len(latencies)} pages (target < 100 ms)"
            )
            pages = []
            for _ in range(6):  # the first request also compiles the page's template
                t = time.perf_counter()
                client.get(f"/run/{run_id}").raise_for_status()
                pages.append(time.perf_counter() - t)
            print(
                f"viewer run page (first 50 of {len(ids)}): first {1000 * pages[0]:.1f} ms, then median "
                f"{1000 * statistics.median(pages[1:]):.1f} ms"
            )

            if args.screenshots:
                shots = args.screenshots
                shots.mkdir(parents=True, exist_ok=True)
                hicupid = make_run("hicupid", root / "hicupid" / "scripted-fixture")
                benchpres = make_run("benchpres", root / "benchpres" / "scripted-fixture")
                full = write_html_report([run, hicupid, benchpres], Path(tmp) / "full.html")
                with chromium(1280, 1500) as driver:
                    driver.get(full.as_uri())
                    driver.save_screenshot(str(shots / "report.png"))
                    driver.get(base + "/")
                    driver.save_screenshot(str(shots / "viewer-runs.png"))
                    driver.get(f"{base}/run/{run_id}?{urlencode({'type': 'changing', 'per_page': 20})}")
                    driver.save_screenshot(str(shots / "viewer-run.png"))
                    driver.get(f"{base}/instance/{run_id}?{urlencode({'id': ids[1]})}")
                    driver.save_screenshot(str(shots / "viewer-instance.png"))
                print(f"screenshots in {shots}/")


if __name__ == "__main__":
    main()

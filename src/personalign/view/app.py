"""`personalign view`: a local web app over a directory of runs (Starlette, server-rendered pages).

Pages: the run list; one run (its summary metrics, compared column by column with another run of the
same benchmark, and its instances, filtered by type, error or disagreement with the other run and
paginated on the server); one instance (every step: model, prompt, raw output of each attempt,
parsed value, errors and retries, tokens, cost, latency). Every page is a plain URL, so a link to an
instance can be shared. Run directories are re-read incrementally at each request (`runs_index`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from personalign import registry
from personalign.redact import redact_text
from personalign.runs.spec import RenderedMessages
from personalign.view.runs_index import (
    RunIndex,
    RunsRoot,
    disagree,
    instance_type,
    record_status,
    scores,
)

PER_PAGE = 50
MAX_PER_PAGE = 500


def flatten_metrics(summary: dict[str, Any] | None, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """The summary's scalar entries as dotted keys (lists of two numbers kept: they are CIs); the
    per-instance `errors` maps and per-step counts are left out (the instance list shows them)."""
    out: dict[str, Any] = {}
    for key, value in (summary or {}).items():
        name = f"{prefix}{key}"
        if key in ("errors", "steps", "per_model", "warnings", "selection", "models") or depth > 4:
            continue
        if isinstance(value, dict):
            out.update(flatten_metrics(value, name + ".", depth + 1))
        elif isinstance(value, (int, float, str)) or value is None:
            out[name] = value
        elif isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
            out[name] = f"[{value[0]:.4g}, {value[1]:.4g}]"
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "–" if value is None else str(value)


def create_app(root: Path) -> Starlette:
    """The viewer over every run directory under `root`."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    runs = RunsRoot(root)
    renderers: dict[str, Any] = {}

    def messages(run_id: str, run: RunIndex, record: dict[str, Any]) -> RenderedMessages:
        renderer = renderers.get(run_id)
        if renderer is None or renderer.manifest is not run.manifest:
            # the benchmark's own renderer (its spec's optional `view_messages` hook)
            spec = registry.get(run.benchmark) if registry.has(run.benchmark) else None
            target = getattr(spec, "view_messages", None)
            if target is None:
                return RenderedMessages(
                    {}, f"{run.benchmark} runs store prompt names and hashes; messages are not rebuilt"
                )
            renderer = renderers[run_id] = registry.load_target(target)(run.manifest)
        return renderer.render(record)  # type: ignore[no-any-return]

    env = Environment(
        loader=PackageLoader("personalign.view", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["redact"] = lambda value: redact_text(str(value))
    env.filters["fmt"] = _fmt
    env.filters["pretty"] = lambda value: redact_text(json.dumps(value, indent=2, ensure_ascii=False))
    from importlib.resources import files

    css = (files("personalign.view") / "static" / "report.css").read_text(encoding="utf-8")

    def page(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = env.get_template(name).render(css=css, root=str(runs.root), **context)
        return HTMLResponse(html, status_code=status_code)

    def not_found(what: str) -> HTMLResponse:
        return page("not_found.html.j2", status_code=404, what=what)

    async def index(request: Request) -> Response:
        return page("runs.html.j2", runs=runs.scan())

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        run = runs.get(run_id)
        if run is None:
            return not_found(f"run {run_id!r}")
        q = request.query_params
        other_id = q.get("compare") or ""
        other = runs.get(other_id) if other_id else None
        if other_id and other is None:
            return not_found(f"run {other_id!r} to compare with")
        kind = q.get("type") or ""
        errors_only = q.get("error") == "1"
        differing = q.get("disagree") == "1" and other is not None
        ids = [
            i
            for i, record in run.records.items()
            if (not kind or instance_type(record) == kind)
            and (not errors_only or record_status(record) == "error")
            and (not differing or disagree(record, other.records.get(i) if other else None))
        ]
        try:
            per_page = min(MAX_PER_PAGE, max(1, int(q.get("per_page") or PER_PAGE)))
            number = max(1, int(q.get("page") or 1))
        except ValueError:
            per_page, number = PER_PAGE, 1
        pages = max(1, math.ceil(len(ids) / per_page))
        number = min(number, pages)
        shown = ids[(number - 1) * per_page : number * per_page]
        rows: list[dict[str, Any]] = []
        for i in shown:
            record = run.records[i]
            theirs = other.records.get(i) if other else None
            rows.append(
                {
                    "id": i,
                    "type": instance_type(record),
                    "status": record_status(record),
                    "scores": scores(record),
                    "other_status": record_status(theirs) if theirs else None,
                    "other_scores": scores(theirs) if theirs else {},
                    "disagree": other is not None and disagree(record, theirs),
                }
            )
        score_keys = sorted({k for row in rows for k in row["scores"]})
        mine = flatten_metrics(run.summary)
        comparison = None
        if other is not None:
            theirs_m = flatten_metrics(other.summary)
            keys = list(dict.fromkeys([*mine, *theirs_m]))
            comparison = [(k, mine.get(k), theirs_m.get(k)) for k in keys]
        params = {k: v for k, v in q.items() if k != "page"}

        def page_link(n: int) -> str:
            return f"?{urlencode({**params, 'page': n})}"

        candidates = [i for i, r in runs.scan().items() if r.benchmark == run.benchmark and i != run_id]
        return page(
            "run.html.j2",
            run_id=run_id,
            run=run,
            other_id=other_id if other else "",
            candidates=candidates,
            rows=rows,
            score_keys=score_keys,
            metrics=mine,
            comparison=comparison,
            n_matching=len(ids),
            page=number,
            pages=pages,
            page_link=page_link,
            kind=kind,
            errors_only=errors_only,
            differing=differing,
            query=urlencode({"compare": other_id}) if other else "",
        )

    async def instance_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        run = runs.get(run_id)
        if run is None:
            return not_found(f"run {run_id!r}")
        instance_id = request.query_params.get("id", "")
        record = run.records.get(instance_id)
        if record is None:
            return not_found(f"instance {instance_id!r} in run {run_id!r}")
        other_id = request.query_params.get("compare") or ""
        other = runs.get(other_id) if other_id else None
        ids = list(run.records)
        position = ids.index(instance_id)
        return page(
            "instance.html.j2",
            run_id=run_id,
            run=run,
            record=record,
            messages=messages(run_id, run, record),
            status=record_status(record),
            kind=instance_type(record),
            other_id=other_id if other else "",
            other_record=other.records.get(instance_id) if other else None,
            previous=ids[position - 1] if position > 0 else None,
            next=ids[position + 1] if position + 1 < len(ids) else None,
            urlencode=urlencode,
        )

    return Starlette(
        routes=[
            Route("/", index),
            Route("/run/{run_id:path}", run_page),
            Route("/instance/{run_id:path}", instance_page),
        ]
    )


__all__ = ["RunIndex", "create_app", "flatten_metrics"]

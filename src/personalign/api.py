"""The public Python API behind `import personalign`: run and rescore any registered benchmark.

Thin functions over the registry (`personalign.registry`) and the one run lifecycle
(`personalign.runs.lifecycle`), so a script does what `personalign run <benchmark>` does::

    import personalign
    result = personalign.run("cupid", model="scripted/a", judge="scripted/b", limit=3, task="both")
    run = personalign.load_run(result.run_dir.path)
    again = personalign.rescore(result.run_dir.path, judge="scripted/c")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from personalign import registry
from personalign.errors import ConfigError
from personalign.llm.spec import subject_and_judge
from personalign.protocols.upstream import resolve_protocol
from personalign.runs.lifecycle import RunResult, RunSettings, rescore_benchmark, run_benchmark
from personalign.runs.schema import benchmark_of
from personalign.runs.spec import BenchmarkSpec, Option, role_specs
from personalign.runs.store import RunDir

__all__ = ["RunResult", "agreement", "list_benchmarks", "rescore", "run"]


def list_benchmarks() -> list[str]:
    """The names of every registered benchmark (built-in, installed plug-ins, registered at run time)."""
    return registry.names()


def _split_options(
    spec: BenchmarkSpec[Any, Any, Any], given: Mapping[str, Any], *, rescoring: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The benchmark's options as (config scope, selection scope), each option's default where not
    given; an option the benchmark does not declare is a ConfigError naming the ones it does."""
    declared = {o.name: o for o in spec.options if o.rescore or not rescoring}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        valid = ", ".join(sorted(declared)) or "none"
        what = "rescore option" if rescoring else "option"
        raise ConfigError(f"{spec.name} has no {what} {', '.join(map(repr, unknown))} (its options: {valid})")
    config: dict[str, Any] = {}
    selection: dict[str, Any] = {}
    for name, option in declared.items():
        value = _normalize(option, given.get(name, None if rescoring else option.default))
        (selection if option.scope == "selection" else config)[name] = value
    return config, selection


def _normalize(option: Option, value: Any) -> Any:
    """A repeatable option as a tuple (a single value or None allowed), as the CLI passes it."""
    if not option.repeatable:
        return value
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def run(
    benchmark: str,
    *,
    model: str | None = None,
    judge: str | None = None,
    models: Mapping[str, str] | None = None,
    data: str | Path = "fixture",
    protocol: str | None = None,
    limit: int | None = None,
    seed: int | None = None,
    run_dir: str | Path | None = None,
    runs_root: str | Path = "runs",
    concurrency: int = 8,
    cache: str | Path | None = None,
    use_cache: bool = True,
    max_cost_usd: float | None = None,
    prices: str | Path | None = None,
    protocol_dir: str | Path | None = None,
    progress: bool = False,
    announce: Callable[[str], None] | None = None,
    batch: bool = False,
    **options: Any,
) -> RunResult:
    """Run (or resume, or return the finished) `benchmark` as `personalign run <benchmark>` does.

    `model` is the subject and `judge` the judge (both default to the embedded `local/smollm2`; a
    `model` other than it needs a `judge`); `models` gives any further role (e.g. ``{"matcher":
    ...}``), else it defaults as the benchmark declares. `options` are the benchmark's own options
    by their Python names (e.g. ``task="both"``, ``instance_types=["consistent"]``). The protocol
    defaults to `paper` on official hub data and `personalign` otherwise (or as the benchmark's
    optional `default_protocol` hook says). `announce` is given the run's one-line description
    (`spec.describe`) before it starts: the CLI prints it. `batch` sends the model calls through
    the providers' batch APIs, at their batch price (docs/batch.md).
    """
    spec = registry.get(benchmark)
    subject, judge_spec = subject_and_judge(model, judge)
    roles = [r.name for r in spec.roles]
    extra_roles = dict(models or {})
    unknown_roles = sorted(set(extra_roles) - set(roles))
    if unknown_roles:
        names = ", ".join(map(repr, unknown_roles))
        raise ConfigError(f"{benchmark} has no model role {names} (its roles: {', '.join(roles)})")
    specs = role_specs(spec, {**extra_roles, "subject": subject, "judge": judge_spec})
    config_options, selection = _split_options(spec, options)
    default_protocol = getattr(spec, "default_protocol", None)
    protocol = protocol or (default_protocol(str(data)) if default_protocol else None)
    chosen = resolve_protocol(protocol, official_data=str(data).split(":", 1)[0] == "hf")
    config = spec.make_config(specs, config_options, chosen)
    settings = RunSettings(
        run_dir=Path(run_dir) if run_dir is not None else None,
        runs_root=Path(runs_root),
        concurrency=concurrency,
        limit=limit,
        selection=selection,
        seed=spec.default_seed if seed is None else seed,
        cache_path=Path(cache) if cache is not None else None,
        use_cache=use_cache,
        max_cost_usd=max_cost_usd,
        prices=Path(prices) if prices is not None else None,
        progress=progress,
        protocol_dir=Path(protocol_dir) if protocol_dir is not None else None,
        batch=batch,
    )
    if announce is not None:
        announce(spec.describe(config))
    return run_benchmark(spec, config, settings, data=data)


def rescore(
    path: str | Path,
    *,
    judge: str | None = None,
    models: Mapping[str, str] | None = None,
    data: str | Path | None = None,
    run_dir: str | Path | None = None,
    concurrency: int = 8,
    cache: str | Path | None = None,
    use_cache: bool = True,
    max_cost_usd: float | None = None,
    prices: str | Path | None = None,
    protocol_dir: str | Path | None = None,
    progress: bool = False,
    batch: bool = False,
    **options: Any,
) -> RunResult:
    """Re-judge the run at `path` with another `judge` (or other judging roles in `models`, or the
    benchmark's rescore options) into a new run directory, reusing the subject's saved outputs."""
    manifest = RunDir(path).read_manifest()
    spec = registry.get(benchmark_of(manifest))
    roles = dict(models or {}, **({"judge": judge} if judge is not None else {}))
    rescorable = {r.name for r in spec.roles if r.rescorable}
    fixed = sorted(set(roles) - rescorable)
    if fixed:
        raise ConfigError(
            f"rescore cannot replace {', '.join(fixed)} of a {spec.name} run "
            f"(it can replace: {', '.join(sorted(rescorable))})"
        )
    config_options, selection_options = _split_options(spec, options, rescoring=True)
    settings = RunSettings(
        run_dir=Path(run_dir) if run_dir is not None else None,
        concurrency=concurrency,
        cache_path=Path(cache) if cache is not None else None,
        use_cache=use_cache,
        max_cost_usd=max_cost_usd,
        prices=Path(prices) if prices is not None else None,
        progress=progress,
        protocol_dir=Path(protocol_dir) if protocol_dir is not None else None,
        batch=batch,
    )
    return rescore_benchmark(
        spec, Path(path), settings, models=roles, options={**config_options, **selection_options}, data=data
    )


def agreement(run_a: str | Path, run_b: str | Path) -> dict[str, Any]:
    """Cohen's kappa and raw agreement between two runs' judges, as `personalign agree` prints it,
    by the rule of the runs' benchmark (its spec's optional `agreement` hook)."""
    # imported here for start-up speed: runs.agree loads the metrics (numpy), which `run` never needs
    from personalign.runs.agree import agreement as judge_agreement

    name = benchmark_of(RunDir(run_a).read_manifest())
    target = getattr(registry.get(name), "agreement", None) if registry.has(name) else None
    return judge_agreement(Path(run_a), Path(run_b), registry.load_target(target) if target else None)

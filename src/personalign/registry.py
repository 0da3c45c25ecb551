"""The benchmark registry: every benchmark by name, loaded only when it is used.

Built-in benchmarks are listed here by import path; third-party ones register a `BenchmarkSpec`
object through the ``personalign.benchmarks`` entry point group, e.g. in their pyproject.toml::

    [project.entry-points."personalign.benchmarks"]
    mybench = "mypackage.bench:SPEC"

Listing names imports nothing, so `personalign --help` stays fast; `get(name)` imports the one
module that defines the benchmark.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING, Any

from personalign.errors import ConfigError

if TYPE_CHECKING:  # typing only: importing the spec module would load the model layer at start-up
    from personalign.runs.spec import BenchmarkSpec

ENTRY_POINT_GROUP = "personalign.benchmarks"

BUILTIN: dict[str, str] = {
    "cupid": "personalign.benchmarks.cupid.spec:SPEC",
    "hicupid": "personalign.benchmarks.hicupid.spec:SPEC",
    "benchpres": "personalign.benchmarks.benchpres.spec:SPEC",
    "prefeval": "personalign.benchmarks.prefeval.spec:SPEC",
}

# The benchmark a command uses when none is named (`validate`, `memory-eval`).
DEFAULT_BENCHMARK = "cupid"

# Registered at run time (tests, notebooks): name -> "module:attribute" or the spec object itself.
_EXTRA: dict[str, Any] = {}


def register(name: str, target: Any) -> None:
    """Add a benchmark in this process: an import path "module:attribute" or a spec object."""
    _EXTRA[name] = target
    get.cache_clear()


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)
    get.cache_clear()


def _entry_points() -> dict[str, str]:
    from importlib.metadata import entry_points  # ~40 ms: only when a listing needs the plug-ins

    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """Every registered benchmark's name: built-in first, then installed plug-ins and extras."""
    found = dict(BUILTIN)
    for name, value in {**_entry_points(), **_EXTRA}.items():
        found.setdefault(name, value)
    return list(found)


def has(name: str) -> bool:
    """Whether `name` is registered; a built-in or run-time name is answered without scanning the
    installed packages' entry points (~40 ms), so `personalign run cupid` does not pay for it."""
    return name in _EXTRA or name in BUILTIN or name in _entry_points()


def load_target(target: Any) -> Any:
    """The object an import path "module:attribute" names (a non-string target is returned as is)."""
    if not isinstance(target, str):
        return target
    module, _, attribute = target.partition(":")
    loaded: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else ():
        loaded = getattr(loaded, part)
    return loaded


@cache
def get(name: str) -> BenchmarkSpec[Any, Any, Any]:
    """The spec registered as `name` (a `runs.spec.BenchmarkSpec`); ConfigError if there is none."""
    target = _EXTRA.get(name) or BUILTIN.get(name) or _entry_points().get(name)
    if target is None:
        raise ConfigError(f"unknown benchmark {name!r} (registered: {', '.join(names())})")
    spec = load_target(target)
    if getattr(spec, "name", None) != name:
        found = getattr(spec, "name", None)
        raise ConfigError(f"benchmark {name!r} is registered as {target!r}, whose spec is named {found!r}")
    return spec  # type: ignore[no-any-return]

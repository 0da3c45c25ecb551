"""personalign: measure and improve how LLM assistants personalize from what users reveal over time.

The public API (everything in `__all__`; other modules are internals, importable but not promised)::

    import personalign
    personalign.list_benchmarks()                 # ['cupid', 'hicupid', 'benchpres', ...]
    result = personalign.run("cupid", model="openai/gpt-4o-mini", judge="openai/gpt-4o", limit=20)
    run = personalign.load_run(result.run_dir.path)   # typed manifest, summary, records
    personalign.rescore(result.run_dir.path, judge="anthropic/claude-sonnet-4-5")
    engine = personalign.MemoryEngine("memory.sqlite")

Names are imported on first use (module `__getattr__`), so `import personalign` stays cheap: the CLI
imports this package before every command. (The benchmark names are `list_benchmarks()`, not
`benchmarks()`: `personalign.benchmarks` is the package of the built-in benchmarks.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typing only: the real imports happen lazily in __getattr__
    from personalign._version import __version__
    from personalign.api import RunResult, list_benchmarks, rescore, run
    from personalign.memory.engine import MemoryEngine
    from personalign.results import LoadedRun, RunManifest, RunSummary, load_run
    from personalign.runs.spec import BenchmarkSpec, Option, Role

# public name -> the module that defines it (imported on first access)
_LAZY: dict[str, str] = {
    "__version__": "personalign._version",  # importlib.metadata costs ~40 ms: not at every CLI start
    "run": "personalign.api",
    "rescore": "personalign.api",
    "list_benchmarks": "personalign.api",
    "RunResult": "personalign.api",
    "load_run": "personalign.results",
    "LoadedRun": "personalign.results",
    "RunManifest": "personalign.results",
    "RunSummary": "personalign.results",
    "MemoryEngine": "personalign.memory.engine",
    "registry": "personalign.registry",
    "BenchmarkSpec": "personalign.runs.spec",
    "Role": "personalign.runs.spec",
    "Option": "personalign.runs.spec",
}

__all__ = [
    "BenchmarkSpec",
    "LoadedRun",
    "MemoryEngine",
    "Option",
    "Role",
    "RunManifest",
    "RunResult",
    "RunSummary",
    "__version__",
    "list_benchmarks",
    "load_run",
    "registry",
    "rescore",
    "run",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (PEP 562) and cache the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'personalign' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if module == f"personalign.{name}" else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""What a benchmark plug-in gives the shared run lifecycle and the CLI: one `BenchmarkSpec`.

A benchmark lives in one folder (`personalign/benchmarks/<name>/`, or any installed package) and
exposes one object satisfying `BenchmarkSpec`; the registry (`personalign.registry`) finds it by
name, built-in or through the `personalign.benchmarks` entry point group. Everything generic (the
run directory, manifest, resume, the finished-run check, rescore, the CLI's options) is written
once in `runs/lifecycle.py` and `cli.py`; the spec answers only what is the benchmark's own.

The spec is typed over three parameters: its config (`C`: a frozen dataclass with one attribute per
model role, `protocol`, and `to_record()`), its loaded dataset (`D`: with `source` and `sha256`)
and its evaluation item (`I`: what the `Evaluator` evaluates, e.g. one CUPID instance).

Optional hooks (a spec defines them only when it needs them; the lifecycle and CLI read them with
`getattr`, so specs written before a hook existed keep working):

- ``models_of(config) -> dict[str, str]``: role -> model spec actually called, when that is not
  simply ``getattr(config, role)`` (BenchPreS: the memory judge is the judge unless given, and only
  for a context strategy that selects).
- ``expand(config, items) -> list``: the units of work for the selected items (BenchPreS: each row
  once per sample); default: the items themselves.
- ``manifest_models(config, models) -> dict``: manifest entries that need the built models (BenchPreS:
  whether the subject's backend controls reasoning).
- ``report_tables(run_dirs) -> dict[str, Table]``: the run's tables for the shared
  ``report.md/.csv/.json`` (CUPID and HiCUPID runs reported together land in one file); a spec
  without it writes its own files with `write_report`.
- ``default_protocol(data) -> str``: the protocol when ``--protocol`` is not given (default: ``paper``
  on the official hub data, else ``personalign``); ``protocol_help: str`` replaces its help text.
- ``cli: str``: ``"module:function"`` of ``register(app, run_app)`` adding the benchmark's extra
  commands (e.g. ``run hicupid-retrieval``); loaded only when such a command is asked for.
- ``html_section: str``: ``"module:function"`` of ``html_section(run_dirs) -> report.sections.Section``,
  the benchmark's part of ``personalign report --html`` (tables and plots); without it the page lists
  the runs' manifests only.
- ``memory_eval: str``: ``"module:function"`` of ``memory_eval(data, *, k, embedder, methods) ->
  MemoryEvalResult``, the judge-free retrieval quality of the memory engine against baselines on the
  benchmark's data (``personalign memory-eval --format <name>``).
- ``view_messages: str``: ``"module:Class"``; ``Class(manifest)`` has ``manifest`` and ``render(record)
  -> RenderedMessages``, the messages each step of a saved record sent (``personalign view``'s
  instance page); without it the page says the messages are not rebuilt.
- ``agreement: str``: ``"module:attribute"`` of a `runs.agree.AgreementRule` (``personalign agree``).
- ``protocol_show: str``: ``"module:attribute"`` of a `ProtocolShow` (its options and a function
  returning the text): ``personalign protocol show <name>`` prints the exact messages a run sends.

- ``synth: str``: ``"module:function"`` of ``register(synth_app)`` adding ``personalign synth <name>``
  (data synthesis; `personalign.synth_options.synth_command` adds the shared options); loaded only
  when `synth` is used.

Hooks named by an import path are loaded only when their command runs, so a spec module stays cheap
to import (the CLI imports it to build `personalign run <name>` and for the finished-run check).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # typing only: a spec module imports this one, and must load without the model layer
    from personalign.llm.model import Model
    from personalign.runs.records import InstanceRecord
    from personalign.runs.runner import Evaluator

C = TypeVar("C", bound="BenchmarkConfig")
D = TypeVar("D", bound="Dataset")
I = TypeVar("I")  # noqa: E741 - the item type, read as "instance"

OptionType = Literal["str", "int", "float", "bool", "path"]


@dataclass(frozen=True)
class Role:
    """A model role the benchmark calls (subject, judge, decomposer, ...).

    `defaults_to` names the role whose spec is used when this one is not given (the CUPID
    decomposer defaults to the judge); `subject` and `judge` are the two roles every CLI run takes
    (`--model`, `--judge`); any further role gets its own `--<role>` option.
    """

    name: str
    help: str
    defaults_to: str | None = None
    rescorable: bool = True  # `rescore` may replace it (never the subject: its outputs are reused)


@dataclass(frozen=True)
class Option:
    """One benchmark-specific CLI option of `personalign run <benchmark>` (and maybe `rescore`).

    `scope="config"` options go into the config (they change results and the run's identity);
    `scope="selection"` options choose which items run (recorded in the selection, not the identity).
    `default=None` with a `help` that says what None means lets the config pick a protocol default.
    """

    name: str  # the Python name; the flag is --name with "_" -> "-" unless `flag` is given
    type: OptionType
    help: str
    default: Any = None
    repeatable: bool = False
    choices: tuple[str, ...] | None = None
    flag: str | None = None  # e.g. "--type" for the option named question_type
    scope: Literal["config", "selection"] = "config"
    rescore: bool = False  # also accepted by `personalign rescore` on this benchmark's runs
    boolean_flags: tuple[str, str] | None = None  # ("--both-orders", "--one-order") for a bool

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


# Every benchmark's first role: the model under evaluation (its outputs are reused by `rescore`).
SUBJECT = Role("subject", "The model under evaluation.", rescorable=False)


class BenchmarkConfig(Protocol):
    """What the lifecycle reads from any benchmark's config."""

    @property
    def protocol(self) -> str: ...

    def to_record(self) -> dict[str, Any]: ...


class Dataset(Protocol):
    """What the lifecycle reads from a loaded dataset."""

    @property
    def source(self) -> str: ...

    @property
    def sha256(self) -> str | None: ...


@dataclass(frozen=True)
class Selection:
    """Which items of the dataset to evaluate: `limit` plus the benchmark's selection options."""

    limit: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """As recorded in the manifest and summary: ``{"limit": ..., <option>: [...]}``."""
        return {"limit": self.limit, **{k: _plain(v) for k, v in self.options.items()}}

    def first(self, items: Sequence[I]) -> list[I]:
        """The first `limit` of the (already filtered) items, all of them without a limit."""
        return list(items[: self.limit])


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple | list) else value


@dataclass(frozen=True)
class RunContext:
    """What an evaluator may need from how the run is set up (none of it changes results)."""

    seed: int
    cache_path: Path | None  # the call cache file (None with --no-cache): side caches live next to it
    protocol_dir: Path | None  # a local copy of the upstream files for --protocol paper


@runtime_checkable
class BenchmarkSpec(Protocol[C, D, I]):
    """A benchmark plug-in. Implementations are plain objects; see docs/write-a-benchmark.md."""

    name: str  # the registry key and `personalign run <name>`
    title: str  # one line for `personalign run --help`
    roles: tuple[Role, ...]
    options: tuple[Option, ...]
    default_seed: int
    item_noun: str  # "instances", "questions", "rows": used in messages

    # --- config -------------------------------------------------------------------------------
    def make_config(self, models: Mapping[str, str], options: Mapping[str, Any], protocol: str) -> C:
        """The config from resolved model specs (every role), the config-scope options (None where the
        user gave nothing) and the chosen protocol; invalid combinations raise ConfigError."""
        ...

    def config_from_record(self, record: Mapping[str, Any]) -> C:
        """The config a manifest recorded (`to_record()`), for rescore."""
        ...

    def rescore_config(self, old: C, models: Mapping[str, str], options: Mapping[str, Any]) -> C:
        """`old` with the given roles and rescore options replaced (ConfigError if nothing changes)."""
        ...

    def run_dir_parts(self, config: C) -> list[str]:
        """Readable parts of the default run directory name after the subject's label."""
        ...

    def describe(self, config: C) -> str:
        """The one-line banner printed before a run (models, task, context, protocol)."""
        ...

    # --- data ---------------------------------------------------------------------------------
    def describe_data(self, data: str | Path) -> tuple[str, str | None]:
        """(source, sha256) without loading: the finished-run check; sha256 None when unknown (hub)."""
        ...

    def load(self, data: str | Path) -> D: ...

    def data_record(self, dataset: D) -> dict[str, Any]:
        """The manifest's `data` section: source, sha256 and counts."""
        ...

    def select(self, dataset: D, selection: Selection) -> list[I]:
        """The items to evaluate, in order (limit applied)."""
        ...

    def items(self, dataset: D) -> Sequence[I]:
        """Every item (rescore picks the ones the old run evaluated)."""
        ...

    def validate(self, data: str | Path) -> dict[str, Any]:
        """`personalign validate`: what the data holds (counts), after a full schema check."""
        ...

    # --- identity, manifest -------------------------------------------------------------------
    def identity(self, config: C, source: str, sha256: str | None, seed: int) -> dict[str, Any]:
        """What defines the results (hashed into the run directory's name and checked on resume)."""
        ...

    def protocol_texts(self, config: C, context: RunContext) -> Any:
        """The verified official texts when `config.protocol == "paper"` (else None)."""
        ...

    def manifest_extra(self, config: C, texts: Any) -> dict[str, Any]:
        """Manifest entries of the benchmark's own: at least `prompts` (name -> sha256); the
        upstream source under `--protocol paper`; extra environment facts."""
        ...

    # --- evaluation ---------------------------------------------------------------------------
    def evaluator(
        self, config: C, models: Mapping[str, Model], dataset: D, texts: Any, context: RunContext
    ) -> Evaluator[I]:
        """The per-item evaluator; it may raise ConfigError for items it cannot run (checked early)."""
        ...

    def check(self, evaluator: Evaluator[I], items: Sequence[I]) -> None:
        """Refuse a selection the evaluator cannot run, before any call (ConfigError)."""
        ...

    def kept_on_rescore(self, step: str) -> bool:
        """Whether `rescore` reuses this saved step (the subject's outputs), instead of re-running it."""
        ...

    # --- results ------------------------------------------------------------------------------
    def summarize(self, records: Iterable[InstanceRecord], config: C, seed: int) -> dict[str, Any]:
        """The metrics (pure function of the records): merged into summary.json."""
        ...

    def summary_header(self, config: C) -> dict[str, Any]:
        """Summary entries that describe the run (task, context, method, ...), before the metrics."""
        ...

    def print_summary(self, summary: Mapping[str, Any], run_dir: Path) -> None:
        """The console table after a run."""
        ...

    def write_report(self, run_dirs: Sequence[Path], out: Path) -> str:
        """The paper-style tables of these runs, written under `out`; returns the Markdown."""
        ...


def selection_defaults(spec: BenchmarkSpec[Any, Any, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every selection option of `spec`, the given value or its default (a repeatable option without
    a default: an empty tuple), so the selection recorded in manifest and summary always names them all."""
    out: dict[str, Any] = {}
    for option in spec.options:
        if option.scope != "selection":
            continue
        value = given.get(option.name)
        if value is None or (option.repeatable and not value):
            value = option.default
        out[option.name] = tuple(value or ()) if option.repeatable else value
    return out


def role_specs(spec: BenchmarkSpec[Any, Any, Any], given: Mapping[str, str | None]) -> dict[str, str]:
    """Every role's model spec: the given ones, then each missing role from its `defaults_to`."""
    resolved: dict[str, str] = {k: v for k, v in given.items() if v is not None}
    for role in spec.roles:
        if role.name not in resolved and role.defaults_to is not None and role.defaults_to in resolved:
            resolved[role.name] = resolved[role.defaults_to]
    return resolved


@dataclass(frozen=True)
class MemoryEvalResult:
    """What a benchmark's `memory_eval` hook returns: the data read, the summary (per method), the
    Markdown table printed, and per-instance scores when the benchmark has them (written by --out)."""

    source: str
    sha256: str | None
    summary: dict[str, Any]
    table: str
    instances: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ProtocolShow:
    """A benchmark's `personalign protocol show <name>`: its own options (beside the shared --instance,
    --setting, --protocol, --protocol-dir and --data), and `show(instance, settings, *, protocol,
    protocol_dir, data, **options) -> str`, the text printed."""

    show: Callable[..., str]
    options: tuple[Option, ...] = ()
    instance_help: str = "Instance id."
    setting_help: str = "Which steps or settings to show (repeatable)."


@dataclass(frozen=True)
class RenderedMessages:
    """What a `view_messages` renderer returns for one record: step name -> (role, content) messages,
    or `reason` why none could be rebuilt."""

    steps: dict[str, list[tuple[str, str]]]
    reason: str | None = None

"""Versioned, typed models of a run directory's files: `manifest.json` and `summary.json`.

`samples.jsonl` lines are `runs.records.InstanceRecord`. The manifest and summary carry a
`schema_version` (`SCHEMA_VERSION` for files written now); a file without one was written before
versioning and reads as version 0, where no field is required, exactly as such files always read.
A version newer than this code knows, or a field of the wrong type, is a `ConfigError` naming the
file and the field and saying what to do. Benchmark-specific entries (CUPID's `inference` block,
HiCUPID's `method`, ...) are kept as extra fields. The public face is `personalign.results`; the
JSON Schemas in docs/schema/ are generated from these models (scripts/export_schemas.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from personalign.errors import ConfigError

SCHEMA_VERSION = 1

UPGRADE_HINT = "upgrade personalign (pip install -U personalign) to read it"

RunStatus = Literal["complete", "complete_with_errors", "stopped_budget", "interrupted"]


# Run directories written before the manifest named its benchmark (schema version 0) are CUPID runs:
# CUPID was the only benchmark then.
UNNAMED_RUN_BENCHMARK = "cupid"


def benchmark_of(manifest: Mapping[str, Any]) -> str:
    """The benchmark a run's manifest names (`UNNAMED_RUN_BENCHMARK` for a manifest without one)."""
    return str(manifest.get("benchmark") or UNNAMED_RUN_BENCHMARK)


class NewerSchemaError(ConfigError):
    """A run file written by a newer personalign, in a format this one does not know."""


class _Versioned(BaseModel):
    """A run file with a `schema_version`; from version 1 on, `required_fields` must be present."""

    model_config = ConfigDict(extra="allow", frozen=True)

    required_fields: ClassVar[tuple[str, ...]] = ()

    schema_version: int = Field(
        0,
        ge=0,
        strict=True,
        description="Format version of this file; absent (read as 0) in files written before versioning",
    )

    @model_validator(mode="after")
    def _required_from_version_1(self) -> _Versioned:
        if self.schema_version >= 1:
            missing = [name for name in self.required_fields if getattr(self, name) is None]
            if missing:
                raise ValueError(f"missing field(s) required from schema_version 1: {', '.join(missing)}")
        return self


def _required_in_schema(required: tuple[str, ...]) -> Any:
    """A `json_schema_extra` hook listing the fields the current version requires."""

    def hook(schema: dict[str, Any]) -> None:
        schema["required"] = ["schema_version", *required]
        for name in required:  # the published schema is the current version's: required means set
            prop = schema["properties"][name]
            prop.pop("default", None)
            options = [o for o in prop.pop("anyOf", []) if o.get("type") != "null"]
            if len(options) == 1:
                prop.update(options[0])
            elif options:
                prop["anyOf"] = options

    return hook


class DataSection(BaseModel):
    """The manifest's `data`: where the data came from and its checksum, plus the benchmark's counts."""

    model_config = ConfigDict(extra="allow", frozen=True)

    source: str = Field(description="fixture:<file>, hf:<repo>:<split>, or a local path")
    sha256: str | None = Field(None, description="sha256 of the data read; null when unknown (hub)")


class RescoredFrom(BaseModel):
    """The manifest's `rescored_from`: the run whose subject outputs a rescored run reuses."""

    model_config = ConfigDict(extra="allow", frozen=True)

    run_dir: str
    identity_hash: str | None = None


_MANIFEST_REQUIRED = (
    "benchmark",
    "protocol",
    "identity",
    "identity_hash",
    "config",
    "models",
    "data",
    "prompts",
    "seed",
    "environment",
)


class RunManifest(_Versioned):
    """manifest.json: what defines the results (identity) and how they were obtained."""

    model_config = ConfigDict(
        extra="allow", frozen=True, json_schema_extra=_required_in_schema(_MANIFEST_REQUIRED)
    )
    required_fields = _MANIFEST_REQUIRED

    benchmark: str | None = Field(None, description="registry name, e.g. cupid (version 0: absent = cupid)")
    protocol: str | None = Field(None, description="paper (official prompts) or personalign")
    identity: dict[str, Any] | None = Field(
        None, description="what defines the results; must match on resume"
    )
    identity_hash: str | None = Field(None, description="first 16 hex digits of sha256(identity)")
    config: dict[str, Any] | None = Field(None, description="the benchmark's full config record")
    models: dict[str, dict[str, Any]] | None = Field(
        None, description="per role: the model spec record (spec, provider, model, base_url, key_env, ...)"
    )
    data: DataSection | None = None
    selection: dict[str, Any] | None = Field(
        None, description="limit and the benchmark's selection options of the first invocation"
    )
    prompts: dict[str, str] | None = Field(None, description="prompt or official file name -> sha256")
    seed: int | None = None
    max_cost_usd: float | None = None
    prices: str | None = Field(None, description="price table source: bundled or a path")
    environment: dict[str, Any] | None = Field(
        None, description="packages, git_revision, platform (and benchmark-specific facts)"
    )
    upstream: dict[str, Any] | None = Field(None, description="--protocol paper: the official source read")
    protocol_source: dict[str, Any] | None = Field(
        None, description="--protocol paper (HiCUPID): the official source read"
    )
    rescored_from: RescoredFrom | None = None
    created: str | None = Field(None, description="UTC timestamp of the first invocation")
    updated: str | None = Field(None, description="UTC timestamp of the last resume")


_SUMMARY_REQUIRED = ("benchmark", "protocol", "status", "finished", "models", "usage", "steps", "warnings")


class RunSummary(_Versioned):
    """summary.json: status, the run's description, the metrics (benchmark-specific extras), usage."""

    model_config = ConfigDict(
        extra="allow", frozen=True, json_schema_extra=_required_in_schema(_SUMMARY_REQUIRED)
    )
    required_fields = _SUMMARY_REQUIRED

    benchmark: str | None = None
    protocol: str | None = None
    status: RunStatus | None = None
    finished: str | None = Field(None, description="UTC timestamp")
    models: dict[str, str] | None = Field(None, description="role -> provider/model")
    usage: dict[str, Any] | None = Field(
        None, description="calls, cache_hits, errors, tokens, cost_usd, per_model, ... of the invocation"
    )
    steps: dict[str, dict[str, Any]] | None = Field(
        None, description="per step name: role, steps, errors, truncated, empty, reasked, ..."
    )
    warnings: list[str] | None = None
    selection: dict[str, Any] | None = None
    rescored_from: str | None = Field(None, description="the source run directory of a rescored run")
    notice: str | None = None
    n_instances: int | None = None
    n_errors: int | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        """The benchmark's own entries (metrics, its run description): every field not common to all."""
        return dict(self.model_extra or {})


def _location(error: Any) -> str:
    return ".".join(str(part) for part in error["loc"])


def validate_file(model: type[_Versioned], data: Any, path: Path, what: str) -> _Versioned:
    """`data` (parsed JSON of `path`) as `model`; a newer version or a malformed field is a ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the {what} is corrupt (not a JSON object)")
    version = data.get("schema_version", 0)
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{path}: field 'schema_version' is {version}, newer than this personalign reads "
            f"(up to {SCHEMA_VERSION}); {UPGRADE_HINT}"
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"field '{_location(first)}' of the {what}" if first["loc"] else f"the {what}"
        message = str(first["msg"]).removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(
            f"{path}: {where} is invalid: {message}{more}; the file does not match schema_version "
            f"{version!r} (docs/results-format.md). Restore the file or re-run into a new --run-dir; "
            f"if a newer personalign wrote it, {UPGRADE_HINT}"
        ) from None

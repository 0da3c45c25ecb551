"""`personalign protocol show cupid`: the exact messages a CUPID run sends for one instance, per step
(role headers and text), to diff against the official code. The spec's `protocol_show` hook."""

from __future__ import annotations

from pathlib import Path

from personalign.benchmarks.cupid.config import CupidConfig, default_subject_max_tokens
from personalign.benchmarks.cupid.data import load_cupid
from personalign.benchmarks.cupid.protocol import load_paper_prompts
from personalign.benchmarks.cupid.steps import CupidPrompts, show_calls
from personalign.errors import ConfigError
from personalign.protocols.upstream import Protocol
from personalign.runs.spec import Option, ProtocolShow


def show(
    instance: str,
    settings: list[str],
    *,
    protocol: Protocol,
    protocol_dir: Path | None,
    data: str,
    context: str,
    matcher_format: str,
    system_role: str,
    inferred: str,
    checklist: list[str] | None,
    response: str,
    max_tokens: int | None,
) -> str:
    """Every call of the chosen steps (one `--setting`, default all) with stand-ins for the outputs
    of earlier steps: a header per call, then each message under its role."""
    if len(settings) > 1:
        raise ConfigError("cupid takes one --setting (which steps to show)")
    config = CupidConfig(
        subject="show",
        decomposer="show",
        matcher="show",
        judge="show",
        context=context,
        task="generation" if context == "gold-preference" else "both",
        matcher_format=matcher_format,  # type: ignore[arg-type]
        subject_max_tokens=max_tokens or default_subject_max_tokens("show", protocol),
        protocol=protocol,
        system_role=system_role,  # type: ignore[arg-type]
    )
    paper = load_paper_prompts(protocol_dir) if protocol == "paper" else None
    dataset = load_cupid(data)
    found = [i for i in dataset.instances if i.id == instance]
    if not found:
        known = ", ".join(i.id for i in dataset.instances[:3])
        raise ConfigError(f"no instance {instance!r} in {dataset.source} (ids look like: {known}, ...)")
    items = checklist or ["<inferred checklist item 1>", "<inferred checklist item 2>"]
    calls = show_calls(
        CupidPrompts(config, paper),
        found[0],
        settings[0] if settings else "all",
        inferred=inferred,
        checklist=items,
        response=response,
    )
    lines: list[str] = []
    for step, role, call in calls:
        params = f"temperature {call.config.temperature}, max_tokens {call.config.max_tokens}"
        if call.config.json_schema is not None:
            params += f", json schema '{call.config.schema_name}'"
        lines.append(f"######## {step} ({role}; {protocol} protocol; {params}; prompt {call.prompt.name})")
        for message in call.messages:
            lines += [f"======== {message.role} ========", message.content]
        lines.append("")
    return "\n".join(lines)


PROTOCOL_SHOW = ProtocolShow(
    show,
    options=(
        Option("context", "str", "full | oracle | oracle-factor | gold-preference | memory", "full"),
        Option("matcher_format", "str", "default | prefmatcher", "default"),
        Option("system_role", "str", "system | developer (judges, --protocol paper)", "system"),
        Option("inferred", "str", "Stand-in inferred preference (decompose, match)", "<inferred preference>"),
        Option("checklist", "str", "Stand-in inferred checklist item for match (repeatable).", None, True),
        Option("response", "str", "Stand-in subject response for the judge.", "<subject response>"),
        Option("max_tokens", "int", "Subject max_tokens (default as `run`)."),
    ),
    instance_help="Instance id, e.g. '1+marine_biologist#consistent'.",
    setting_help="Which steps: all | inference | generation | infer | decompose | match | generate | judge.",
)

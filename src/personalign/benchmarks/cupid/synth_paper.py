"""`personalign synth cupid --protocol paper`: the official synthesis prompts, read at run time.

Every model-written stage uses the official prompt: persona, context factors, sessions (the whole
journey in one call, as upstream), decomposer, user simulator and assistant simulator, read from
kixlab/CUPID at the pinned commit (`protocol.SOURCE`, sha256 per file; `personalign protocol fetch
cupid`); nothing of their text is stored here (the session generator's journey-structure lines are
read from its pinned Python file). This module renders the messages the official code sends (the
simulators' multi-turn chats with the roles flipped for the user simulator) and parses the answers
by the official rules (its JSON and YAML readers, its factor and session validations), except that
an answer they cannot read is an error, and that a journey must follow our session plan.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid.protocol import (
    ASSISTANT_SIMULATOR_YAML,
    DECOMPOSER_YAML,
    FACTORS_GENERATOR_YAML,
    PERSONA_GENERATOR_YAML,
    SESSIONS_GENERATOR_PY,
    SESSIONS_GENERATOR_YAML,
    SOURCE,
    USER_SIMULATOR_YAML,
    PaperPrompt,
    fenced,
    paper_json,
    paper_prompt,
)
from personalign.benchmarks.cupid.synth_checks import PERSONA_TEMPLATE_KEYS
from personalign.errors import ParseError
from personalign.judges.parsing import snippet
from personalign.prompts import PromptTemplate
from personalign.protocols.upstream import ProtocolError, UpstreamFiles, UpstreamSource, open_upstream
from personalign.types import Message

# The section headers of the user simulator's answer (the output format its prompt asks for); the
# official code splits its answer on them and opens each chat with an answer in the same layout.
EVALUATION = "#### Evaluation of AI Assistant's Response"
SCORE = "#### Evaluation Score"
CONTINUE_OR_END = "#### Continue or End?"
SELECTED = "#### Selected Checklist Items"
THINKING = "#### Thinking"
YOUR_MESSAGE = "#### Your Message"


@dataclass(frozen=True)
class PaperSynthPrompts:
    """The official texts a `--protocol paper` synthesis sends, verified against their pins."""

    decomposer: PaperPrompt
    persona: PaperPrompt
    factors: PaperPrompt
    sessions: PaperPrompt
    # The journey-structure line per plan role ("A", "A_changed", "B"), "{number}" for the session.
    structure_lines: Mapping[str, str]
    user_simulator: str  # a system prompt template ({user_profile}, {context_factor}, ...)
    assistant_simulator: str  # a system prompt, formatted with no values as upstream does
    user_simulator_sha256: str
    assistant_simulator_sha256: str
    source: Mapping[str, Any]

    def hashes(self) -> dict[str, str]:
        return dict(self.source["files"])


def _system(files: UpstreamFiles, path: str) -> str:
    value = files.yaml_mapping(path, "system_prompt")["system_prompt"]
    if not isinstance(value, str):
        raise ProtocolError(f"{files.source.name} protocol file {path}: system_prompt must be a string")
    return value


def load_paper_synth_prompts(
    protocol_dir: Path | str | None = None, source: UpstreamSource = SOURCE
) -> PaperSynthPrompts:
    """Read and verify the official synthesis prompts (checkout, $PERSONALIGN_PROTOCOL_DIR_CUPID or cache)."""
    files = open_upstream(source, protocol_dir)
    decomposer = paper_prompt(files, DECOMPOSER_YAML)
    if decomposer.system is None:
        raise ProtocolError(f"cupid protocol file {DECOMPOSER_YAML}: no system_prompt")
    user = _system(files, USER_SIMULATOR_YAML)
    assistant = _system(files, ASSISTANT_SIMULATOR_YAML)
    generators = {}
    for path in (PERSONA_GENERATOR_YAML, FACTORS_GENERATOR_YAML, SESSIONS_GENERATOR_YAML):
        generators[path] = paper_prompt(files, path)
        if generators[path].system is None:
            raise ProtocolError(f"cupid protocol file {path}: no system_prompt")
    return PaperSynthPrompts(
        decomposer=decomposer,
        persona=generators[PERSONA_GENERATOR_YAML],
        factors=generators[FACTORS_GENERATOR_YAML],
        sessions=generators[SESSIONS_GENERATOR_YAML],
        structure_lines=structure_lines(files.text(SESSIONS_GENERATOR_PY)),
        user_simulator=user,
        assistant_simulator=assistant,
        user_simulator_sha256=files.used[USER_SIMULATOR_YAML],
        assistant_simulator_sha256=files.used[ASSISTANT_SIMULATOR_YAML],
        source=files.manifest(),
    )


# The plan roles in the order the official `create_series_structure` tests them (A' first: a
# current-factor session past the first half; then A; then B).
_STRUCTURE_ROLES = ("A_changed", "A", "B")


def structure_lines(code: str) -> dict[str, str]:
    """The journey-structure line templates of the official session generator, read from its code
    (`create_series_structure`'s three f-strings, in order): "{number}" stands for the 1-based id."""
    where = f"cupid protocol file {SESSIONS_GENERATOR_PY}"
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise ProtocolError(f"{where}: not valid Python ({exc})") from None
    function = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "create_series_structure"),
        None,
    )
    if function is None:
        raise ProtocolError(f"{where}: no create_series_structure")
    lines: list[str] = []
    for node in ast.walk(function):
        if isinstance(node, ast.AugAssign) and isinstance(node.value, ast.JoinedStr):
            parts = []
            for part in node.value.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    parts.append(part.value.replace("{", "{{").replace("}", "}}"))
                elif isinstance(part, ast.FormattedValue):
                    parts.append("{number}")
                else:  # pragma: no cover - the pinned file has only these
                    raise ProtocolError(f"{where}: unexpected structure line")
            lines.append("".join(parts))
    if len(lines) != len(_STRUCTURE_ROLES) or not all(line.count("{number}") == 1 for line in lines):
        raise ProtocolError(f"{where}: expected three structure lines with a session number")
    return dict(zip(_STRUCTURE_ROLES, lines, strict=True))


# --- rendering ------------------------------------------------------------------------------


def _generator_messages(prompt: PaperPrompt, **values: Any) -> list[Message]:
    """An official generator call: system and user templates both formatted with `values`, as its
    `Generator` does (the system prompt apart, as Anthropic's API takes it)."""
    assert prompt.system is not None  # checked at load time
    return [
        Message(role="system", content=prompt.system.format(**values)),
        Message(role="user", content=prompt.user.format(**values)),
    ]


def paper_persona_messages(prompts: PaperSynthPrompts, template: Mapping[str, Any]) -> list[Message]:
    """The official persona generator on a batch of one: ``1. <template dict>``."""
    official = {key: template[key] for key in PERSONA_TEMPLATE_KEYS}
    return _generator_messages(prompts.persona, seed_descriptions=f"1. {official}")


def paper_factors_messages(prompts: PaperSynthPrompts, description: str, n_factors: int) -> list[Message]:
    """The official context-factor generator: the persona description and the factor count."""
    return _generator_messages(prompts.factors, user_persona=description, n_factors=n_factors)


def factors_yaml(factors: Sequence[Mapping[str, Any]]) -> str:
    """The factor list as the official session generator receives it (YAML of factor, preference,
    task types)."""
    import yaml

    rows = [
        {"context_factor": f["factor"], "preference": f["preference"], "task_types": list(f["task_types"])}
        for f in factors
    ]
    return str(yaml.dump({"factors": rows}, default_flow_style=False))


def series_structure(prompts: PaperSynthPrompts, plan: Sequence[str]) -> str:
    """The journey structure of a plan (a role per session): a line per A, A' and B session."""
    lines = [
        prompts.structure_lines[role].format(number=i + 1) for i, role in enumerate(plan) if role != "other"
    ]
    return "".join(lines)[:-1]


def contrastive_options(factors: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """The two factors the official session generator offers as A and B: the first two with a
    related factor, in list order."""
    pair = [f["factor"] for f in factors if f.get("related_factor")]
    if len(pair) != 2:
        raise ValueError(f"expected one contrastive pair, found {len(pair)} factors with a related factor")
    return pair[0], pair[1]


def paper_sessions_messages(
    prompts: PaperSynthPrompts,
    description: str,
    factors: Sequence[Mapping[str, Any]],
    plan: Sequence[str],
) -> list[Message]:
    """The official session generator: the whole journey in one call, its structure from `plan`."""
    first, second = contrastive_options(factors)
    return _generator_messages(
        prompts.sessions,
        user_persona=description,
        n_sessions=len(plan),
        context_factors=factors_yaml(factors),
        series_structure=series_structure(prompts, plan),
        first_factor=first,
        second_factor=second,
    )


def numbered(checklist: Sequence[str]) -> str:
    """The checklist as the official user simulator receives it: ``1. item`` lines."""
    return "\n".join(f"{k + 1}. {item}" for k, item in enumerate(checklist))


def opening_answer(request: str) -> str:
    """The user simulator's first turn as the official code seeds its chat: every section empty
    ("N/A"), CONTINUE, and the opening request as its message."""
    sections = [
        (EVALUATION, "N/A"),
        (SCORE, "N/A"),
        (CONTINUE_OR_END, "CONTINUE"),
        (SELECTED, "N/A"),
        (THINKING, "N/A"),
        (YOUR_MESSAGE, request),
    ]
    return "\n\n".join(f"{header}\n\n{body}" for header, body in sections)


def paper_opening(session: Mapping[str, Any]) -> str:
    """The dialogue's first message as the official simulator builds it: the request without the
    preference, its ``[resource]`` placeholder replaced by the resource. Our session prompt asks for
    the resource apart, so a resource with no placeholder is appended, as under our protocol."""
    request = str(session["request_with_factor"])
    resource = session.get("resource")
    if resource is None:
        return request
    if "[resource]" in request:
        return request.replace("[resource]", str(resource))
    return f"{request}\n\n{resource}"


def paper_assistant_messages(prompts: PaperSynthPrompts, chat: Sequence[Mapping[str, str]]) -> list[Message]:
    """The assistant simulator's call: its system prompt, then the dialogue so far (it answers the
    last user message)."""
    system = prompts.assistant_simulator.format()
    return [
        Message(role="system", content=system),
        *(Message(role=m["role"], content=m["content"]) for m in chat),  # type: ignore[arg-type]
    ]


def paper_user_messages(
    prompts: PaperSynthPrompts,
    *,
    persona: str,
    factor: str,
    preference: str,
    checklist: Sequence[str],
    chat: Sequence[Mapping[str, str]],
    raw_turns: Sequence[str],
) -> list[Message]:
    """The user simulator's call, roles flipped as upstream: its own earlier answers (the opening
    one, then `raw_turns`, each whole) are the assistant's turns, the assistant's replies are the user's."""
    system = prompts.user_simulator.format(
        user_profile=persona, context_factor=factor, preference=preference, checklist=numbered(checklist)
    )
    own = [opening_answer(chat[0]["content"].strip()), *raw_turns]
    replies = [m["content"] for m in chat if m["role"] == "assistant"]
    if len(replies) != len(own):
        raise ValueError(f"{len(replies)} assistant replies for {len(own)} user simulator turns")
    messages = [Message(role="system", content=system)]
    for answer, reply in zip(own, replies, strict=True):
        messages += [Message(role="assistant", content=answer), Message(role="user", content=reply)]
    return messages


# --- parsing --------------------------------------------------------------------------------


def parse_paper_user_turn(text: str, n_items: int) -> dict[str, Any]:
    """The official reading of a user simulator answer: the status between ``Continue or End?`` and
    ``Selected Checklist Items`` (END ends the dialogue), the message after ``Your Message``. Also
    read, for the records: the score (1-10, None when unreadable) and the selected item numbers."""
    try:
        status_part, rest = text.split(CONTINUE_OR_END)[1].split(SELECTED)[:2]
        message = rest.split(YOUR_MESSAGE)[1].strip()
    except IndexError:
        raise ParseError(
            f"user simulator: no '{CONTINUE_OR_END}' / '{SELECTED}' / '{YOUR_MESSAGE}' sections: "
            f"{snippet(text)!r}"
        ) from None
    if not message:
        raise ParseError(f"user simulator: empty '{YOUR_MESSAGE}' section")
    status = status_part.strip()
    score = None
    if SCORE in text:
        found = re.search(r"\d+", text.split(SCORE)[1].split(CONTINUE_OR_END)[0])
        score = int(found.group()) if found and 1 <= int(found.group()) <= 10 else None
    selected_part = rest.split(THINKING)[0] if THINKING in rest else rest.split(YOUR_MESSAGE)[0]
    selected = sorted(
        {
            int(n)
            for n in re.findall(r"^\s*[-*]\s*(\d+)\.", selected_part, re.MULTILINE)
            if 1 <= int(n) <= n_items
        }
    )
    return {"message": message, "end": status == "END", "score": score, "hinted_items": selected}


def paper_yaml(text: str, what: str) -> Any:
    """The official `parse_yaml`: the span after the first ```yaml fence up to the last fence, else
    all; a YAML error is a ParseError naming `what`."""
    import yaml

    text = fenced(text, "yaml")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParseError(
            f"{what}: not YAML ({' '.join(str(exc).split())[:200]}): {snippet(text)!r}"
        ) from None


def _text(row: Mapping[str, Any], key: str, what: str) -> str:
    value = row.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ParseError(f"{what}: '{key}' missing or not a non-empty string")
    return value.strip()


def parse_paper_persona(text: str) -> dict[str, str]:
    """The official persona answer for a batch of one: JSON ``personas`` holding one entry with a
    ``description`` and an ``occupation``."""
    value = paper_json(text)
    personas = value.get("personas") if isinstance(value, dict) else None
    if not isinstance(personas, list) or len(personas) != 1 or not isinstance(personas[0], dict):
        raise ParseError("persona: expected a 'personas' list with exactly one persona")
    return {
        "description": _text(personas[0], "description", "persona"),
        "occupation": _text(personas[0], "occupation", "persona"),
    }


FACTOR_KEYS = ("factor_type", "background", "factor", "preference_type", "preference")


def parse_paper_factors(text: str) -> list[dict[str, Any]]:
    """The official factor answer (YAML ``context_factors``), checked as the official validation
    does (exactly one mutual contrastive pair) and further: every field present, distinct names, no
    factor outside the pair naming a related factor, at least one other factor. In our shape:
    ``related_factor`` None for "N/A"."""
    value = paper_yaml(text, "context factors")
    rows = value.get("context_factors") if isinstance(value, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ParseError("context factors: no 'context_factors' list")
    factors: list[dict[str, Any]] = []
    for k, row in enumerate(rows, 1):
        what = f"context factors: factor {k}"
        if not isinstance(row, dict):
            raise ParseError(f"{what}: not a mapping")
        factor: dict[str, Any] = {key: " ".join(_text(row, key, what).split()) for key in FACTOR_KEYS}
        tasks = row.get("task_types")
        if (
            not isinstance(tasks, list)
            or not tasks
            or not all(isinstance(t, str) and t.strip() for t in tasks)
        ):
            raise ParseError(f"{what}: 'task_types' missing or not a list of strings")
        link = _text(row, "related_factor", what)
        factor["task_types"] = [t.strip() for t in tasks]
        factor["related_factor"] = None if link == "N/A" else link
        factors.append(factor)
    names = [f["factor"] for f in factors]
    if len(set(names)) != len(names):
        raise ParseError("context factors: repeated factor names")
    related = [f for f in factors if f["related_factor"] is not None]
    mutual = [
        (a["factor"], b["factor"])
        for i, a in enumerate(related)
        for b in related[i + 1 :]
        if a["related_factor"] == b["factor"] and b["related_factor"] == a["factor"]
    ]
    if len(mutual) != 1:
        raise ParseError(f"context factors: {len(mutual)} mutual contrastive pairs, expected exactly one")
    if len(related) != 2:
        raise ParseError("context factors: a factor outside the contrastive pair names a related factor")
    if len(factors) < 3:
        raise ParseError("context factors: need at least one factor besides the contrastive pair")
    if related[0]["preference"].lower() == related[1]["preference"].lower():
        raise ParseError("context factors: the contrastive pair has the same preference")
    return factors


def _bare(text: str) -> str:
    """A name or preference as the official validation compares them: without dots, stripped."""
    return text.replace(".", "").strip()


def parse_paper_sessions(
    text: str, factors: Sequence[Mapping[str, Any]], plan: Sequence[str]
) -> dict[str, Any]:
    """The official session answer (YAML ``scenarios``), checked as the official validation does
    (the count; every factor and preference from the list; the current factor A four times before
    the last, its preference twice, then a different one A' twice and in the last session; the
    contrastive factor B with its own preference) and against our plan: A, A' and B exactly at the
    plan's positions, no A or B elsewhere. Returns the sessions in our shape and the plan info
    (current and contrastive factor, A', the plan)."""
    value = paper_yaml(text, "sessions")
    rows = value.get("scenarios") if isinstance(value, dict) else None
    if not isinstance(rows, list):
        raise ParseError("sessions: no 'scenarios' list")
    if len(rows) != len(plan):
        raise ParseError(f"sessions: {len(rows)} scenarios, expected {len(plan)}")
    sessions: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        what = f"sessions: scenario {i + 1}"
        if not isinstance(row, dict):
            raise ParseError(f"{what}: not a mapping")
        resource = row.get("resource")
        if resource is not None and not isinstance(resource, str):
            raise ParseError(f"{what}: 'resource' is not a string")
        sessions.append(
            {
                "id": i,
                "context_factor": " ".join(_text(row, "context_factor", what).split()),
                "preference": " ".join(_text(row, "preference", what).split()),
                "task_type": _text(row, "task_type", what),
                "story": _text(row, "story", what),
                "request_with_factor_and_preference": _text(row, "request_with_factor_and_preference", what),
                "request_with_factor": _text(row, "request_with_factor", what),
                "resource": resource.strip() if resource and resource.strip() else None,
            }
        )
    by_name = {_bare(f["factor"]): f for f in factors}
    preferences = {_bare(f["preference"]) for f in factors}
    current = by_name.get(_bare(sessions[-1]["context_factor"]))
    options = set(contrastive_options(factors))
    if current is None or current["factor"] not in options:
        raise ParseError("sessions: the last scenario's factor is not one of the contrastive pair")
    contrast = by_name[_bare(str(current["related_factor"]))]
    changed = sessions[-1]["preference"]
    for i, (session, role) in enumerate(zip(sessions, plan, strict=True)):
        what = f"sessions: scenario {i + 1}"
        factor = by_name.get(_bare(session["context_factor"]))
        if factor is None:
            raise ParseError(f"{what}: factor {session['context_factor']!r} is not in the factor list")
        session["context_factor"] = factor["factor"]
        expected = {"A": current, "A_changed": current, "B": contrast}.get(role)
        if expected is not None and factor is not expected:
            raise ParseError(f"{what}: the journey structure puts {expected['factor']!r} here")
        if expected is None and factor in (current, contrast):
            raise ParseError(f"{what}: {factor['factor']!r} outside the positions the structure gives it")
        if role == "A_changed":
            if session["preference"] != changed:
                raise ParseError(f"{what}: the changed preference differs from the last scenario's")
        elif role == "A" and _bare(session["preference"]) != _bare(current["preference"]):
            raise ParseError(f"{what}: factor A's preference is not its preference in the factor list")
        elif role == "B" and session["preference"] != contrast["preference"]:
            raise ParseError(f"{what}: the contrastive factor with a different preference")
        elif role == "other" and _bare(session["preference"]) not in preferences:
            raise ParseError(f"{what}: preference not found in the factor list")
        if role == "A":
            session["preference"] = current["preference"]
        session["plan"] = role
    if _bare(changed) == _bare(current["preference"]) or _bare(changed) in preferences:
        raise ParseError("sessions: the changed preference A' repeats a preference of the factor list")
    info = {
        "current_factor": current["factor"],
        "contrastive_factor": contrast["factor"],
        "changed_preference": changed,
        "plan": [[role, session["context_factor"]] for role, session in zip(plan, sessions, strict=True)],
    }
    return {"sessions": sessions, "info": info}


def paper_decomposer_messages(prompts: PaperSynthPrompts, preference: str) -> list[Message]:
    """The official decomposer call: both templates filled with the preference (`{preferences}`)."""
    assert prompts.decomposer.system is not None  # checked at load time
    return [
        Message(role="system", content=prompts.decomposer.system.format(preferences=preference)),
        Message(role="user", content=prompts.decomposer.user.format(preferences=preference)),
    ]


def label(path: str, sha256: str) -> PromptTemplate:
    """A name and hash for step records (the official texts are never rendered as our templates)."""
    return PromptTemplate(name=f"{SOURCE.repo}:{path}", system="", user="", sha256=sha256)


def paper_pins() -> dict[str, str]:
    """The pinned sha256 of each official file a `--protocol paper` synthesis reads (its identity)."""
    paths = (
        DECOMPOSER_YAML,
        USER_SIMULATOR_YAML,
        ASSISTANT_SIMULATOR_YAML,
        PERSONA_GENERATOR_YAML,
        FACTORS_GENERATOR_YAML,
        SESSIONS_GENERATOR_YAML,
        SESSIONS_GENERATOR_PY,
    )
    return {p: SOURCE.files[p] for p in paths}

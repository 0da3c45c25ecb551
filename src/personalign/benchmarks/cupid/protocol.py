"""Where CUPID's official evaluation prompts live: kixlab/CUPID at a pinned commit, each file sha256-pinned.

The texts themselves are never stored in this repository; they are read at run time through
`personalign.protocols.upstream` from a local checkout or the `protocol fetch` cache.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from personalign.errors import ParseError
from personalign.judges.parsing import snippet
from personalign.prompts import PromptTemplate
from personalign.protocols.upstream import ProtocolError, UpstreamFiles, UpstreamSource, open_upstream
from personalign.types import Message, Session

INFERRER_YAML = "prompts/evaluation/preference_inferrer.yaml"
MATCHER_YAML = "prompts/evaluation/preference_matcher.yaml"
PREFMATCHER_YAML = "prompts/evaluation/preference_matcher_model.yaml"
GENERATOR_YAML = "prompts/evaluation/response_generator.yaml"
JUDGE_YAML = "prompts/evaluation/response_judger.yaml"
DECOMPOSER_YAML = "prompts/synthesis/preference_decomposer.yaml"
MATCHER_PY = "evaluation/modules/preference_matcher.py"
# Synthesis (`personalign synth cupid --protocol paper`, benchmarks/cupid/synth_paper.py).
USER_SIMULATOR_YAML = "prompts/synthesis/user_simulator.yaml"
ASSISTANT_SIMULATOR_YAML = "prompts/synthesis/assistant_simulator.yaml"
PERSONA_GENERATOR_YAML = "prompts/synthesis/persona_generator.yaml"
FACTORS_GENERATOR_YAML = "prompts/synthesis/context_factors_generator.yaml"
SESSIONS_GENERATOR_YAML = "prompts/synthesis/sessions_generator.yaml"
# The session generator's journey-structure lines are built in its code, not its YAML.
SESSIONS_GENERATOR_PY = "synthesis/modules/sessions_generator.py"

SOURCE = UpstreamSource(
    name="cupid",
    repo="kixlab/CUPID",
    commit="a8560cab293ae98be4fe260689d58bddf96b51ef",
    license="MIT",
    files={
        INFERRER_YAML: "b20374118413bd228b67a6fc3ac210766ff2415f8c3014cc61b6b432e83be472",
        MATCHER_YAML: "71c5093971cf7e7836f7a295d6a43749ea038d8bfc959b6b70a267a370f2c1ac",
        PREFMATCHER_YAML: "7b6950efd93b094e54855bf0b3461e858e4db4e238c632320998b3f175931b94",
        GENERATOR_YAML: "ff560852a4bcd5f11f79e64b57c5233e7a74cecf757dedf6db8ede198e54e566",
        JUDGE_YAML: "254de52c9d88136b6d12745ee6d48507345de741bd31dd219a9968b53a3de0a9",
        DECOMPOSER_YAML: "3b93f7cd604ae5dfceb3c5d9ddcf8604c13e9e0312eca97c161a002120decef6",
        MATCHER_PY: "441c9162195d96274ac98b6b7732e9d3ef0eb72c424986a45b87492c8ccef6c9",
        USER_SIMULATOR_YAML: "d216beb18c4b9b890fc7290b9e7aec82f28070dbdc03653e9be7179beb11ad79",
        ASSISTANT_SIMULATOR_YAML: "a81ffe02a2cb8d72b5488741696626376104265781665bf39020d2d255f8d617",
        PERSONA_GENERATOR_YAML: "82bd8848d9fc290d1e017a30faf506072e382e25a7d1bd9409d3c2cb02ec9360",
        FACTORS_GENERATOR_YAML: "74d58c837f0844edf6b107d2b378d7dbb84afd846606e1e6525db881d2bff6c2",
        SESSIONS_GENERATOR_YAML: "ffa0a4cc9f77f0e2166117d48526f140694e58602d99c47a4b4afaa4558cbf54",
        SESSIONS_GENERATOR_PY: "d14175c5eb9d3f2b188acf01003e367a96a9dd8ab751557578774e279493711c",
    },
)

# --- the official prompts, loaded ------------------------------------------------------------

# Sampling of the official evaluator (evaluation/modules/*.py, synthesis/modules/preference_decomposer.py,
# evaluation/models/gpt_41_nano.py): every role at temperature 0; these max_tokens.
PAPER_SUBJECT_MAX_TOKENS = 8192
PAPER_MATCHER_MAX_TOKENS = 8192
PAPER_JUDGE_MAX_TOKENS = 8192
PAPER_DECOMPOSER_MAX_TOKENS = 4096

SystemRole = Literal["system", "developer"]
SYSTEM_ROLES: tuple[str, ...] = ("system", "developer")

_INFERENCE_HEADER = "### Most Likely Preference"
_SCORE_HEADERS = ("### **Evaluation Score**", "### Evaluation Score")
_LABEL_HEADER = "### Evaluation Label"
_MATCH_LABELS = ("Fully Covered", "Partially Covered", "Not Covered")


@dataclass(frozen=True)
class PaperPrompt:
    """One official YAML prompt: its system and user templates (Python str.format syntax)."""

    path: str
    system: str | None
    user: str
    sha256: str

    def label(self) -> PromptTemplate:
        """A name and hash for step records (never rendered: the official texts use str.format)."""
        return PromptTemplate(name=f"{SOURCE.repo}:{self.path}", system="", user="", sha256=self.sha256)


@dataclass(frozen=True)
class CupidPaperPrompts:
    """Every official text a CUPID `--protocol paper` run sends, read from the pinned upstream files."""

    inferrer: PaperPrompt
    generator: PaperPrompt
    decomposer: PaperPrompt
    matcher: PaperPrompt
    prefmatcher: PaperPrompt
    judge: PaperPrompt
    matcher_examples: tuple[Mapping[str, Any], ...]
    source: Mapping[str, Any]

    def hashes(self) -> dict[str, str]:
        return dict(self.source["files"])


def paper_prompt(files: UpstreamFiles, path: str) -> PaperPrompt:
    """One official YAML prompt (`user_prompt`, optional `system_prompt`), verified against its pin."""
    data = files.yaml_mapping(path, "user_prompt")
    system, user = data.get("system_prompt"), data["user_prompt"]
    if not isinstance(user, str) or not (system is None or isinstance(system, str)):
        raise ProtocolError(f"{files.source.name} protocol file {path}: prompts must be strings")
    return PaperPrompt(path=path, system=system, user=user, sha256=files.used[path])


def load_paper_prompts(
    protocol_dir: Path | str | None = None, source: UpstreamSource = SOURCE
) -> CupidPaperPrompts:
    """Read and verify the official prompt files (checkout, $PERSONALIGN_PROTOCOL_DIR_CUPID or cache)."""
    files = open_upstream(source, protocol_dir)
    prompts = {
        role: paper_prompt(files, path)
        for role, path in (
            ("inferrer", INFERRER_YAML),
            ("generator", GENERATOR_YAML),
            ("decomposer", DECOMPOSER_YAML),
            ("matcher", MATCHER_YAML),
            ("prefmatcher", PREFMATCHER_YAML),
            ("judge", JUDGE_YAML),
        )
    }
    for role in ("decomposer", "matcher", "prefmatcher", "judge"):
        if prompts[role].system is None:
            raise ProtocolError(f"cupid protocol file {prompts[role].path}: no system_prompt")
    examples = files.constant(MATCHER_PY, "EXAMPLES")
    if not isinstance(examples, list) or not all(
        isinstance(e, dict) and isinstance(e.get("preference"), str) and isinstance(e.get("checklist"), dict)
        for e in examples
    ):
        raise ProtocolError(
            f"cupid protocol file {MATCHER_PY}: EXAMPLES is not a list of preference/checklist"
        )
    return CupidPaperPrompts(**prompts, matcher_examples=tuple(examples), source=files.manifest())


# --- rendering: the messages the official code sends -------------------------------------------


def format_interaction_log(sessions: Sequence[Session]) -> str:
    """The prior sessions in the official log layout (utils/formatting.py): numbered, role headers, rules."""
    out = ""
    for number, session in enumerate(sessions, start=1):
        out += f"### Session {number}\n\n"
        for message in session.dialogue:
            speaker = "User" if message.role == "user" else "AI Assistant"
            out += f"#### {speaker}\n\n{message.content}\n\n"
        out += "---\n\n"
    return out.strip()


def _coverage_label(score: Any) -> str:
    if score == 1:
        return "Fully Covered"
    if score == 0.5:
        return "Partially Covered"
    return "Not Covered"


def matcher_examples_block(examples: Sequence[Mapping[str, Any]]) -> str:
    """The matcher's few-shot block, laid out as the official matcher builds it from EXAMPLES."""
    block = ""
    for example in examples:
        block += f"#### Preference\n\n{example['preference']}\n\n#### Output\n\n```json\n"
        results = [
            {"index": i + 1, "entry": entry, "label": _coverage_label(example["checklist"][entry])}
            for i, entry in enumerate(example["checklist"])
        ]
        block += json.dumps({"results": results}, indent=2)
        block += "\n```\n\n---\n\n"
    return block.strip()


def _pair(system_role: SystemRole, system: str | None, user: str) -> list[Message]:
    messages = [Message(role="user", content=user)]
    if system is not None:
        messages.insert(0, Message(role=system_role, content=system))
    return messages


def paper_infer_messages(prompts: CupidPaperPrompts, request: str, interaction_log: str) -> list[Message]:
    """The subject's inference call: the system prompt as stored, the user prompt filled."""
    user = prompts.inferrer.user.format(curr_request=request, interaction_log=interaction_log)
    return _pair("system", prompts.inferrer.system, user)


def paper_generate_messages(prompts: CupidPaperPrompts, request: str, interaction_log: str) -> list[Message]:
    """The subject's generation call."""
    user = prompts.generator.user.format(curr_request=request, interaction_log=interaction_log)
    return _pair("system", prompts.generator.system, user)


def _generator_call(prompt: PaperPrompt, system_role: SystemRole, **values: Any) -> list[Message]:
    """As the official `Generator.__call__`: both templates filled with the same keyword values."""
    assert prompt.system is not None  # checked at load time
    return _pair(system_role, prompt.system.format(**values), prompt.user.format(**values))


def paper_decompose_messages(
    prompts: CupidPaperPrompts, preference: str, system_role: SystemRole = "system"
) -> list[Message]:
    return _generator_call(prompts.decomposer, system_role, preferences=preference)


def paper_match_messages(
    prompts: CupidPaperPrompts,
    checklist: Sequence[str],
    preference: str,
    matcher_format: str = "default",
    system_role: SystemRole = "system",
) -> list[Message]:
    """The matcher call; PrefMatcher-7B (served by vLLM upstream) always gets a `system` message."""
    numbered = "\n".join(f"{j + 1}. {entry}" for j, entry in enumerate(checklist))
    if matcher_format == "prefmatcher":
        return _generator_call(
            prompts.prefmatcher, "system", checklist=numbered, preference=preference, examples=None
        )
    examples = matcher_examples_block(prompts.matcher_examples)
    return _generator_call(
        prompts.matcher, system_role, checklist=numbered, preference=preference, examples=examples
    )


def paper_judge_messages(
    prompts: CupidPaperPrompts,
    request: str,
    response: str,
    preference: str,
    checklist: Sequence[str],
    system_role: SystemRole = "system",
) -> list[Message]:
    return _generator_call(
        prompts.judge,
        system_role,
        user_request=request,
        ai_response=response,
        preference=preference,
        checklist="\n".join(f"- {item}" for item in checklist),
    )


# --- parsing: the official rules, except that what they cannot read is an error ----------------


def parse_paper_inferred(text: str) -> str:
    """The text after the first ``### Most Likely Preference`` header, up to the first newline."""
    parts = text.split(_INFERENCE_HEADER)
    if len(parts) < 2:
        raise ParseError(f"no '{_INFERENCE_HEADER}' header in the output")
    preference = parts[1].strip().split("\n")[0].strip()
    if not preference:
        raise ParseError(f"nothing after the '{_INFERENCE_HEADER}' header")
    return preference


def fenced(text: str, language: str) -> str:
    """What the official readers parse: the span after the first ```<language> fence up to the
    last fence, else all of `text`; stripped."""
    text = text.strip()
    if f"```{language}" in text:
        text = text.split(f"```{language}")[1].rsplit("```", 1)[0]
    return text.strip()


def paper_json(text: str) -> Any:
    """The official `parse_json`: the span after the first ```json fence up to the last fence, else all."""
    text = fenced(text, "json")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"not JSON ({exc}): {snippet(text)!r}") from None


def parse_paper_checklist(text: str) -> list[str]:
    """The decomposer's ``checklist`` list (official: no length cap; must hold strings)."""
    value = paper_json(text)
    items = value.get("checklist") if isinstance(value, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ParseError("decomposer: no 'checklist' list of strings")
    return list(items)


def parse_paper_match(text: str, n_items: int, matcher_format: str = "default") -> list[str]:
    """The labels of the matcher's ``results`` (PrefMatcher: the bare list), one per checklist item.

    Upstream sums whatever entries come back and scores an unknown label 0; here a wrong count or
    an unknown label is an error.
    """
    value = paper_json(text)
    if matcher_format == "prefmatcher":
        entries = value
    else:
        entries = value.get("results") if isinstance(value, dict) else None
    if not isinstance(entries, list):
        expected = "a JSON list" if matcher_format == "prefmatcher" else "a JSON object with a 'results' list"
        raise ParseError(f"matcher: expected {expected}")
    if len(entries) != n_items:
        raise ParseError(f"matcher: {len(entries)} results for {n_items} checklist items")
    labels = []
    for position, entry in enumerate(entries, start=1):
        label = entry.get("label") if isinstance(entry, dict) else None
        if label not in _MATCH_LABELS:
            raise ParseError(
                f"matcher: result {position} has label {label!r}, not one of {list(_MATCH_LABELS)}"
            )
        labels.append(str(label))
    return labels


def parse_paper_judgement(text: str) -> dict[str, Any]:
    """The score after ``### Evaluation Score`` with the official clean-up (evaluation/pipeline/result.py)."""
    text = text.strip()
    raw: str | None = None
    for header in _SCORE_HEADERS:
        if header in text:
            raw = text.split(header)[1].strip()
            break
    if raw is None:
        raise ParseError("judge: no '### Evaluation Score' section")
    score = raw.strip()
    if "/" in score:
        score = score.split("/")[0]
    if "." in score:
        score = score.split(".")[0]
    if "\n\n" in score:
        score = score.split("\n\n")[0]
    if "**" in score:
        score = score.replace("**", "")
    try:
        value = float(score)
    except ValueError:
        raise ParseError(f"judge: score {snippet(raw)!r} is not a number") from None
    if not math.isfinite(value):
        raise ParseError(f"judge: score {score!r} is not finite")
    label = ""
    if _LABEL_HEADER in text:
        label = text.split(_LABEL_HEADER)[1].strip().split("\n")[0].strip()
    return {"score": value, "label": label}

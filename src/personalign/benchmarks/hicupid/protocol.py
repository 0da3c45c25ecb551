"""HiCUPID's paper protocol: the official prompts and sampling settings, read at run time.

The texts live in anonymsubmission-arr/HiCUPID at a pinned commit (``src/constants.py``:
``INFERENCE_PROMPTS`` and ``EVALUATION_PROMPTS``; ``configs/*_openai.yaml``: sampling parameters) and
are never stored in this repository. They are read through `personalign.protocols.upstream`
(sha256-verified; Python constants through `ast`, never executed). The functions below assemble the
messages exactly as the official ``build_messages``/``build_messages_rag`` (inference) and
``build_messages`` (evaluation) do, taking the official templates as parameters, and read the judges'
replies by the official output format with an anchored rule (see `parse_paper_ab`).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from personalign.benchmarks.hicupid.schema import HiCupidHistory, HiCupidQA
from personalign.errors import ConfigError, ParseError
from personalign.judges.parsing import snippet
from personalign.protocols.upstream import ProtocolError, UpstreamFiles, UpstreamSource, open_upstream
from personalign.types import Message

CONSTANTS_PY = "src/constants.py"
INFERENCE_YAML = "configs/inference_openai.yaml"
EVALUATION_YAML = "configs/evaluate_openai.yaml"
# Read by benchmarks/hicupid_parity.py (pinned so `protocol fetch` brings them); runs read the three above.
INFERENCE_PY = "src/utils/inference.py"
EVALUATE_PY = "src/utils/evaluate.py"
BM25_PY = "src/utils/bm25.py"
RETRIEVE_PY = "src/utils/retrieve.py"

SOURCE = UpstreamSource(
    name="hicupid",
    repo="anonymsubmission-arr/HiCUPID",
    commit="958a4b3775394d3cd318f4e980e25a1ee02e62e4",
    license="Apache-2.0",
    files={
        CONSTANTS_PY: "a449a241b866710f7f6a22b1f36832cafbd13b0f729320bce1e510d7061eeac9",
        INFERENCE_YAML: "0519a122f8f51ec189ff2a7552cbcf91da919612681733ef3df7759f6947cadd",
        EVALUATION_YAML: "24e73219469fda94e33b512b0ab81222e352ed5f7e39852c419f98e66bc2e1f4",
        INFERENCE_PY: "54b4a7c995f3e0fa03d1ac649ef9c720d765de1a5eb6442d3369cb4ebef55d07",
        EVALUATE_PY: "950292793112ed4ac51b7bf82823b8c9ea7ffd5f9eedf6ba9c59b03d2c390e13",
        BM25_PY: "e87702e379a8d744b88b5ee096d2160c0809f062ce35f928de95e991da35a831",
        RETRIEVE_PY: "e6ac97ac6bbff76305cbd592efe252c0ceae80540eb9c4e560c27ab6cd69680f",
    },
)

PAPER_SHOTS: tuple[int, ...] = (0, 1, 3, 5)
QUESTION_TYPES = ("persona", "profile", "schedule")
Slot = Literal["A", "B"]
PromptMessages = Sequence[Mapping[str, str]]


@dataclass(frozen=True)
class Sampling:
    temperature: float
    max_tokens: int


@dataclass(frozen=True)
class PaperTexts:
    """The official prompt tables and sampling settings, as read (and verified) from the upstream files."""

    inference_prompts: Mapping[str, PromptMessages]
    evaluation_prompts: Mapping[str, PromptMessages]
    subject: Sampling
    judge: Sampling
    source: Mapping[str, Any]  # UpstreamFiles.manifest(): repo, commit, sha256 of every file read

    @property
    def sha256(self) -> str:
        """One digest over the sha256 of every file read (for prompt hashes in the manifest)."""
        files = self.source.get("files", {})
        return hashlib.sha256("".join(f"{p}:{d}\n" for p, d in sorted(files.items())).encode()).hexdigest()


# --- reading the official files ----------------------------------------------------------------


def _literal(node: ast.expr, where: str) -> Any:
    """``ast.literal_eval`` extended with ``"...".strip()`` (the official constants strip their
    triple-quoted texts); anything else that is not a literal is an error naming file and constant."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "strip" and not node.args and not node.keywords:
            value = _literal(func.value, where)
            if isinstance(value, str):
                return value.strip()
        raise ProtocolError(
            f"{where}: unsupported expression {ast.dump(node)[:80]} (only literals and .strip())"
        )
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ProtocolError(f"{where}: dict unpacking is not a literal")
        pairs = zip(node.keys, node.values, strict=True)
        return {_literal(k, where): _literal(v, where) for k, v in pairs}  # type: ignore[arg-type]
    if isinstance(node, ast.List):
        return [_literal(e, where) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e, where) for e in node.elts)
    try:
        return ast.literal_eval(node)
    except ValueError as exc:
        raise ProtocolError(f"{where}: not a literal ({exc})") from None


def read_constant(text: str, path: str, name: str) -> Any:
    """The value assigned to the top-level ``name`` in Python source ``text`` (never executed)."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise ProtocolError(f"hicupid protocol file {path}: not valid Python ({exc})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return _literal(node.value, f"hicupid protocol file {path}, constant {name}")
    raise ProtocolError(f"hicupid protocol file {path}: no top-level constant {name}")


def _prompt_table(value: Any, path: str, name: str, keys: Sequence[str]) -> dict[str, PromptMessages]:
    """Check a prompt table's shape: each needed key maps to a list of {role, content} messages."""
    where = f"hicupid protocol file {path}, constant {name}"
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected a dict of message lists")
    for key in keys:
        messages = value.get(key)
        if not isinstance(messages, list) or not messages:
            raise ProtocolError(f"{where}: no prompt {key!r}")
        for i, m in enumerate(messages):
            if (
                not isinstance(m, dict)
                or m.get("role") not in ("system", "user", "assistant")
                or not isinstance(m.get("content"), str)
            ):
                raise ProtocolError(f"{where}: prompt {key!r} message {i} is not a {{role, content}} message")
    return value


def _sampling(files: UpstreamFiles, path: str) -> Sampling:
    config = files.yaml_mapping(path, "temperature", "max_completion_tokens")
    try:
        return Sampling(float(config["temperature"]), int(config["max_completion_tokens"]))
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"hicupid protocol file {path}: bad sampling settings ({exc})") from None


def inference_keys() -> list[str]:
    return [prompt_key(role, shots) for role in ("system", "user") for shots in PAPER_SHOTS]


def load_paper_texts(
    protocol_dir: Path | str | None = None, source: UpstreamSource | None = None
) -> PaperTexts:
    """Read and verify the official HiCUPID prompts and sampling settings (I/O edge)."""
    files = open_upstream(source or SOURCE, protocol_dir)
    constants = files.text(CONSTANTS_PY)
    inference = _prompt_table(
        read_constant(constants, CONSTANTS_PY, "INFERENCE_PROMPTS"),
        CONSTANTS_PY,
        "INFERENCE_PROMPTS",
        inference_keys(),
    )
    evaluation = _prompt_table(
        read_constant(constants, CONSTANTS_PY, "EVALUATION_PROMPTS"),
        CONSTANTS_PY,
        "EVALUATION_PROMPTS",
        QUESTION_TYPES,
    )
    return PaperTexts(
        inference_prompts=inference,
        evaluation_prompts=evaluation,
        subject=_sampling(files, INFERENCE_YAML),
        judge=_sampling(files, EVALUATION_YAML),
        source=files.manifest(),
    )


# --- the subject's messages --------------------------------------------------------------------


def prompt_key(role: str, shots: int) -> str:
    """The official prompt name: ``zero/<role>`` or ``few/<role>/<shots>`` (shots 1, 3 or 5)."""
    if shots not in PAPER_SHOTS:
        raise ConfigError(
            f"--protocol paper has fixed few-shot sets of 1, 3 or 5 examples; got --shots {shots}"
        )
    if role not in ("system", "user"):
        raise ConfigError(f"instruction role must be system or user, got {role!r}")
    return f"zero/{role}" if shots == 0 else f"few/{role}/{shots}"


def subject_messages(prompt: PromptMessages, context: Sequence[Message], question: str) -> list[Message]:
    """The prompt's system messages, then the history, then its other messages, then the question
    (official ``build_messages`` and ``build_messages_rag``)."""
    system = [Message(role="system", content=m["content"]) for m in prompt if m["role"] == "system"]
    rest = [Message(role=m["role"], content=m["content"]) for m in prompt if m["role"] != "system"]  # type: ignore[arg-type]
    return [*system, *context, *rest, Message(role="user", content=question)]


def paper_history(history: HiCupidHistory) -> HiCupidHistory:
    """The history in the official order: dialogues by ascending dialogue id (a pandas groupby sorts
    them), turns in row order. Retrieval positions and ties follow this order too."""
    ordered = tuple(sorted(history.dialogues, key=lambda d: d.dialogue_id))
    return history if ordered == history.dialogues else history.model_copy(update={"dialogues": ordered})


# --- the judges' messages ----------------------------------------------------------------------


def flat_metadata(qa: HiCupidQA) -> dict[str, Any]:
    """The question's metadata flattened one level, as the official evaluation formats it."""
    out: dict[str, Any] = {}
    for sub in qa.metadata.model_dump().values():
        if isinstance(sub, dict):
            out.update(sub)
    return out


def judge_messages(prompt: PromptMessages, qa: HiCupidQA, answer: str, slot: Slot) -> list[Message]:
    """The official evaluation prompt for ``qa.type`` filled with ``str.format`` (the model's answer in
    ``slot``, the personalized reference in the other; ``answer`` alone for schedule questions)."""
    answer_a = answer if slot == "A" else qa.personalized_answer
    answer_b = answer if slot == "B" else qa.personalized_answer
    values = {
        **flat_metadata(qa),
        "question": qa.question,
        "answer": answer,
        "answer_a": answer_a,
        "answer_b": answer_b,
    }
    try:
        return [Message(role=m["role"], content=m["content"].format(**values)) for m in prompt]  # type: ignore[arg-type]
    except (KeyError, IndexError, ValueError) as exc:
        raise ProtocolError(f"hicupid evaluation prompt for {qa.type!r}: cannot fill it ({exc!r})") from None


# --- reading the judges' replies ---------------------------------------------------------------

# The official parser searches ``Better Response:.*(A|B|Tie)`` (IGNORECASE, greedy) and so takes the
# LAST a/b/tie on the line, letters inside words included ("B, because A ..." reads as A; "Tie
# between them, but B..." as B), and ``Satisfaction:.*(YES|NO)`` reads "YES, it does not ..." as NO.
# Deliberate deviation: we read the token right after the label (optionally decorated), case-insensitive;
# the first label followed by a readable token decides; no readable token anywhere is a ParseError.
_DECOR = r"[ \t*_`\[\(\"']*"
_AB = re.compile(
    rf"Better Response:{_DECOR}(?:(?:response|answer)[ \t]+)?(A|B|Tie)(?![A-Za-z0-9/])", re.IGNORECASE
)
_YESNO = re.compile(rf"Satisfaction:{_DECOR}(YES|NO)(?![A-Za-z0-9/])", re.IGNORECASE)


def parse_paper_ab(text: str) -> Literal["A", "B", "Tie"]:
    """The verdict of the official A/B judge format (``Better Response: [A/B/Tie]``)."""
    match = _AB.search(text)
    if match is None:
        raise ParseError(f"A/B judge: no 'Better Response: A|B|Tie' in {snippet(text)!r}")
    token = match.group(1).upper()
    return "Tie" if token == "TIE" else token  # type: ignore[return-value]


def parse_paper_schedule(text: str) -> bool:
    """The verdict of the official schedule judge format (``Satisfaction: [YES/NO]``); True for YES."""
    match = _YESNO.search(text)
    if match is None:
        raise ParseError(f"schedule judge: no 'Satisfaction: YES|NO' in {snippet(text)!r}")
    return match.group(1).upper() == "YES"

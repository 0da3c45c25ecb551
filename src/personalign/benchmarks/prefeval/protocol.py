"""The texts a PrefEval run sends: our own prompts (``personalign``) or the official ones (``paper``).

``paper`` reads amazon-science/PrefEval at the pinned commit at run time (sha256 per file, see
`pins`), never stored here: the four judge prompts (``error_type/*.txt``), the reminder and
chain-of-thought texts (``utils/common_utils.py``: ``REMINDER``, ``COT_PROMPT``), the system prompt
and token budgets (``config.yaml``), and the strings the official functions build inline (the
answer-length suffix, the RAG context wrapper, the self-critic requests, the MCQ instructions and
the judges' system prompt), read with `ast` from their function bodies, never executed. Both kinds
of texts are combined by the same code, in the official order (see `Texts.question`).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personalign.benchmarks.prefeval import pins
from personalign.benchmarks.prefeval.judges import CHECKS, Check
from personalign.prompts import load_template
from personalign.protocols.upstream import ProtocolError, UpstreamFiles, UpstreamSource, open_upstream

SOURCE = UpstreamSource(
    name="prefeval", repo=pins.REPO, commit=pins.COMMIT, license=pins.LICENSE, files=pins.PROTOCOL_FILES
)

CONFIG_YAML = "config.yaml"
COMMON_PY = "utils/common_utils.py"
EXPLICIT_PY = "utils/explicit_utils.py"
MCQ_PY = "utils/utils_mcq.py"
BASELINES_PY = "generation_task/baselines_handling.py"
EVALUATION_PY = "generation_task/llm_based_evaluation_errortypes.py"
JUDGE_FILES: dict[Check, str] = {
    "acknowledge": "error_type/check_acknowledge.txt",
    "violation": "error_type/check_violation.txt",
    "hallucination": "error_type/check_hallucination.txt",
    "helpful": "error_type/check_helpful.txt",
}

# Our own prompt templates (prompts/*.md), by role.
TEMPLATES = {
    "system": "prefeval/system",
    "reminder": "prefeval/reminder",
    "cot": "prefeval/cot",
    "length": "prefeval/length",
    "critique": "prefeval/critique",
    "revision": "prefeval/revision",
    "rag": "prefeval/rag",
    "memory": "prefeval/memory",
    "mcq": "prefeval/mcq",
    "judge_system": "prefeval/judge_system",
    **{f"judge_{check}": f"prefeval/judge_{check}" for check in CHECKS},
}


def fill_braces(text: str, values: Mapping[str, str]) -> str:
    """Replace each ``{name}`` by its value, one name after another (the official ``str.replace``)."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


@dataclass(frozen=True)
class Texts:
    """Every text of one protocol, as templates with ``{name}`` placeholders, and their digests.

    ``rag_item`` formats one retrieved excerpt (``{idx}``, ``{sentence}``); ``mcq`` holds
    ``{formatted_options}``; ``length`` holds ``{max_tokens}``; ``revision`` holds ``{question}``.
    """

    protocol: str
    system: str
    reminder: str  # appended to the question
    cot: str  # prefixed to the question
    length: str  # appended after reminder / chain of thought
    critique: str
    revision: str
    rag_header: str
    rag_item: str
    rag_footer: str
    mcq: str  # appended to the question
    judge_system: str
    judges: Mapping[Check, str]
    max_words: int
    sha256: Mapping[str, str] = field(default_factory=dict)  # manifest: name -> digest
    source: Mapping[str, Any] | None = None  # paper: UpstreamFiles.manifest()

    def question(
        self, question: str, *, reminder: bool = False, cot: bool = False, length: bool = True
    ) -> str:
        """The final user turn: question (+ reminder), (chain-of-thought prefix +) ..., + length limit."""
        if reminder:
            question = question + self.reminder
        if cot:
            question = self.cot + question
        if length:
            question += fill_braces(self.length, {"max_tokens": str(self.max_words)})
        return question

    def rag_prefix(self, excerpts: Sequence[str]) -> str:
        """The retrieved excerpts, numbered from 1, in the wrapper that goes before the question."""
        body = "".join(
            fill_braces(self.rag_item, {"idx": str(i), "sentence": s}) for i, s in enumerate(excerpts, 1)
        )
        return self.rag_header.replace("{k}", str(len(excerpts))) + body + self.rag_footer

    def revision_request(self, question: str) -> str:
        return fill_braces(self.revision, {"question": question})

    def mcq_question(self, question: str, options: str, *, reminder: bool = False, cot: bool = False) -> str:
        return self.question(question, reminder=reminder, cot=cot, length=False) + fill_braces(
            self.mcq, {"formatted_options": options}
        )

    def judge(self, check: Check, values: Mapping[str, str]) -> str:
        return fill_braces(self.judges[check], values)


def _user(name: str) -> str:
    return load_template(name).user


def own_texts(max_words: int = 300) -> Texts:
    """The personalign protocol's texts (our own words; JSON answers for judges and MCQ)."""
    rag = _user(TEMPLATES["rag"])
    header, _, rest = rag.partition("{{excerpts}}")
    footer, _, _ = rest.partition("{{question}}")
    return Texts(
        protocol="personalign",
        system=_user(TEMPLATES["system"]),
        reminder=_user(TEMPLATES["reminder"]).replace("{{question}}", ""),
        cot=_user(TEMPLATES["cot"]).replace("{{question}}", ""),
        length=_user(TEMPLATES["length"])
        .replace("{{question}}", "")
        .replace("{{max_words}}", "{max_tokens}"),
        critique=_user(TEMPLATES["critique"]),
        revision=_user(TEMPLATES["revision"]).replace("{{question}}", "{question}"),
        rag_header=header.replace("{{k}}", "{k}"),
        rag_item="exchange {idx}. {sentence}\n",
        rag_footer=footer,
        mcq=_user(TEMPLATES["mcq"]).replace("{{question}}", "").replace("{{options}}", "{formatted_options}"),
        judge_system=_user(TEMPLATES["judge_system"]),
        judges={c: _braces(_user(TEMPLATES[f"judge_{c}"])) for c in CHECKS},
        max_words=max_words,
        sha256={name: load_template(name).sha256 for name in TEMPLATES.values()},
    )


def _braces(text: str) -> str:
    """``{{name}}`` placeholders as ``{name}`` (the official judge files' style)."""
    return re.sub(r"\{\{\s*([a-z_]+)\s*\}\}", r"{\1}", text)


# --- the official texts -------------------------------------------------------------------------


def _string(node: ast.expr) -> str | None:
    """A string expression as a template: literals as they are, f-string fields as ``{name}``,
    ``+`` of two strings joined; None for anything else (names, calls)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                parts.append("{" + ast.unparse(value.value) + "}")
            else:
                return None
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string(node.left), _string(node.right)
        return left + right if left is not None and right is not None else None
    return None


def function_strings(text: str, path: str, function: str, variable: str) -> list[str]:
    """The string values assigned (``=``) or appended (``+=``) to ``variable`` inside ``function``,
    in source order; assignments of non-strings are skipped. The code is parsed, never executed."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise ProtocolError(f"prefeval protocol file {path}: not valid Python ({exc})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            found: list[tuple[int, str]] = []
            for inner in ast.walk(node):
                target: ast.expr | None = None
                value: ast.expr | None = None
                if isinstance(inner, ast.Assign) and len(inner.targets) == 1:
                    target, value = inner.targets[0], inner.value
                elif isinstance(inner, ast.AugAssign) and isinstance(inner.op, ast.Add):
                    target, value = inner.target, inner.value
                if isinstance(target, ast.Name) and target.id == variable and value is not None:
                    string = _string(value)
                    if string is not None:
                        found.append((getattr(inner, "lineno", 0), string))
            if not found:
                raise ProtocolError(f"prefeval protocol file {path}: no string {variable} in {function}()")
            return [s for _, s in sorted(found)]
    raise ProtocolError(f"prefeval protocol file {path}: no function {function}()")


def _strings(text: str, path: str, function: str, variable: str, what: str, count: int = 1) -> list[str]:
    """The `count` strings `function` assigns to `variable` in an official file; another number is a
    ProtocolError naming the file and `what`."""
    strings = function_strings(text, path, function, variable)
    if len(strings) != count:
        raise ProtocolError(
            f"prefeval protocol file {path}: expected {count} strings for {what}, found {len(strings)}"
        )
    return strings


def _int_assigned(text: str, path: str, function: str, variable: str) -> int:
    tree = ast.parse(text, filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == variable for t in inner.targets)
                    and isinstance(inner.value, ast.Constant)
                    and isinstance(inner.value.value, int)
                ):
                    return inner.value.value
    raise ProtocolError(f"prefeval protocol file {path}: no integer {variable} in {function}()")


@dataclass(frozen=True)
class PaperBudgets:
    """The official token budgets: generation, MCQ answer and judges."""

    max_gen_tokens: int
    max_mcq_tokens: int
    judge_max_tokens: int


def load_paper(protocol_dir: Path | str | None = None) -> tuple[Texts, PaperBudgets]:
    """The official texts and budgets, read and verified from a checkout or the protocols cache."""
    files: UpstreamFiles = open_upstream(SOURCE, protocol_dir)
    config = files.yaml_mapping(CONFIG_YAML, "system_prompt", "max_gen_tokens", "max_mcq_tokens")
    common = files.text(COMMON_PY)
    explicit = files.text(EXPLICIT_PY)
    mcq = files.text(MCQ_PY)
    baselines = files.text(BASELINES_PY)
    evaluation = files.text(EVALUATION_PY)
    length = _strings(explicit, EXPLICIT_PY, "get_question_prompt", "question", "the answer-length suffix")[0]
    rag = _strings(explicit, EXPLICIT_PY, "convert_top_k_sentences_to_msg", "msg", "the RAG wrapper", 3)
    self_critic = "handle_selfcritic_task"
    critique = _strings(baselines, BASELINES_PY, self_critic, "critic_request", "critic_request")
    revision = _strings(baselines, BASELINES_PY, self_critic, "revision_request", "revision_request")
    mcq_format = _strings(mcq, MCQ_PY, "get_mcq_question_format", "mcq_question_format", "the MCQ format")
    judge_system = _strings(evaluation, EVALUATION_PY, "main", "system_prompt", "system_prompt")
    judge_tokens = _int_assigned(evaluation, EVALUATION_PY, "main", "max_tokens")
    reminder = files.constant(COMMON_PY, "REMINDER")
    cot = files.constant(COMMON_PY, "COT_PROMPT")
    del common  # read (and verified) for the constants above
    judges = {check: files.text(path) for check, path in JUDGE_FILES.items()}
    for name, value in (("REMINDER", reminder), ("COT_PROMPT", cot)):
        if not isinstance(value, str):
            raise ProtocolError(f"prefeval protocol file {COMMON_PY}: {name} is not a string")
    budgets = PaperBudgets(int(config["max_gen_tokens"]), int(config["max_mcq_tokens"]), judge_tokens)
    source = files.manifest()
    texts = Texts(
        protocol="paper",
        system=str(config["system_prompt"]),
        reminder=reminder,
        cot=cot,
        length=length,
        critique=critique[0],
        revision=revision[0],
        rag_header=rag[0],  # the official wrapper names a fixed count
        rag_item=rag[1],
        rag_footer=rag[2],
        mcq=mcq_format[0],
        judge_system=judge_system[0],
        judges=judges,
        max_words=budgets.max_gen_tokens,
        sha256={"prefeval/paper": _digest(source.get("files", {}))},
        source=source,
    )
    return texts, budgets


def _digest(files: Mapping[str, str]) -> str:
    return hashlib.sha256("".join(f"{p}:{d}\n" for p, d in sorted(files.items())).encode()).hexdigest()

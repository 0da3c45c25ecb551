"""Prompt templates as files, rendered by one function.

A template file holds a system part and a user part, introduced by the lines
``<!-- system -->`` and ``<!-- user -->``. Placeholders are ``{{name}}``; rendering fails if a
placeholder has no value or a value has no placeholder, so a template and its caller cannot
drift apart silently. Each template's sha256 goes into the run manifest.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from personalign.types import Message

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}")
_SECTION = re.compile(r"^<!--\s*(system|user)\s*-->\s*$", re.MULTILINE)


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    system: str
    user: str
    sha256: str

    @functools.cached_property
    def placeholders(self) -> frozenset[str]:
        return frozenset(_PLACEHOLDER.findall(self.system)) | frozenset(_PLACEHOLDER.findall(self.user))

    def render(self, **values: str) -> list[Message]:
        """Fill the placeholders and return the chat messages (system first, if any)."""
        missing = self.placeholders - values.keys()
        extra = values.keys() - self.placeholders
        if missing or extra:
            raise KeyError(f"template {self.name}: missing {sorted(missing)}, unexpected {sorted(extra)}")

        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)

        messages = []
        if self.system:
            messages.append(Message(role="system", content=fill(self.system)))
        messages.append(Message(role="user", content=fill(self.user)))
        return messages


def parse_template(name: str, text: str) -> PromptTemplate:
    parts: dict[str, str] = {}
    matches = list(_SECTION.finditer(text))
    if not matches:
        raise ValueError(f"template {name}: no <!-- system --> / <!-- user --> sections")
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        parts[match.group(1)] = text[match.end() : end].strip()
    if "user" not in parts:
        raise ValueError(f"template {name}: a user section is required")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return PromptTemplate(name=name, system=parts.get("system", ""), user=parts["user"], sha256=digest)


@cache
def load_template(name: str) -> PromptTemplate:
    """Load a bundled template by name, e.g. ``cupid/infer``.

    ``<benchmark>/<stem>`` is read from the benchmark's folder (``benchmarks/<benchmark>/prompts/``);
    shared templates (``memory/...``, ``synth/...``) from ``personalign/prompts/``. Names are what the
    manifests record, so they stay stable wherever the file lives.
    """
    folder = name.rpartition("/")[0]
    path = resources.files("personalign.prompts").joinpath(f"{name}.md")
    if not path.is_file() and folder:
        head, _, rest = name.partition("/")
        path = resources.files("personalign.benchmarks").joinpath(f"{head}/prompts/{rest}.md")
    if not path.is_file():
        raise FileNotFoundError(f"no bundled prompt template {name!r}")
    return parse_template(name, path.read_text(encoding="utf-8"))

"""PrefEval loader: the official ``benchmark_dataset/`` files, validated row by row.

Sources:
- ``fixture`` (default): our own small sample, stored as one JSON object that maps official paths
  (relative to ``benchmark_dataset/``) to their content, so it is read by the same code;
- ``upstream``: the official files at the pinned commit, downloaded over raw GitHub URLs into the
  protocols cache on first use (sha256 pinned per file, see `pins`), then read from the cache;
- a directory: a PrefEval checkout (holding ``benchmark_dataset/``) or ``benchmark_dataset/`` itself;
- a file: one topic file of one form (e.g. ``.../explicit_preference/travel_hotel.json``); the
  form comes from its folder, MCQ options and distractors from the same ``benchmark_dataset/``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, ValidationError

from personalign.benchmarks.prefeval import pins
from personalign.benchmarks.prefeval.schema import (
    DISTRACTORS_FILE,
    FORM_DIRS,
    MCQ_DIR,
    PREFERENCE_FORMS,
    ROW_TYPES,
    TOPICS,
    ChatTurn,
    DistractorConversation,
    FormRow,
    McqRow,
    PreferenceForm,
    instance_key,
)
from personalign.data.files import field_path, file_sha256
from personalign.errors import ConfigError, DataError
from personalign.fixtures import fixture_path
from personalign.protocols.upstream import UpstreamSource, cache_dir, fetch_source

FIXTURE = "prefeval_sample.json"
DATASET_DIR = "benchmark_dataset"

DATA_SOURCE = UpstreamSource(
    name="prefeval-data",
    repo=pins.REPO,
    commit=pins.COMMIT,
    license=pins.LICENSE,
    files={f"{DATASET_DIR}/{path}": digest for path, digest in pins.DATA_FILES.items()},
)


@dataclass(frozen=True)
class PrefEvalRow:
    """One validated row with where it sits: form, topic, position in its file, MCQ options."""

    form: PreferenceForm
    topic: str
    index: int
    row: FormRow
    mcq: McqRow | None = None

    @property
    def id(self) -> str:
        return instance_key(self.form, self.topic, self.index)


@dataclass(frozen=True)
class LoadedPrefEval:
    """Validated rows, the flattened distractor messages, and where they came from (manifest)."""

    rows: list[PrefEvalRow]
    distractors: tuple[ChatTurn, ...]
    source: str
    sha256: str | None
    files: dict[str, str]  # path -> sha256 of every file read


Reader = Callable[[str], tuple[Any, str, str] | None]  # relative path -> (json, label, sha256) or None


def _dir_reader(root: Path) -> Reader:
    def read(rel: str) -> tuple[Any, str, str] | None:
        path = root / rel
        if not path.is_file():
            return None
        data = path.read_bytes()
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DataError(str(path), None, None, f"not valid JSON ({exc})") from None
        return value, str(path), hashlib.sha256(data).hexdigest()

    return read


def _bundle_reader(path: Path) -> Reader:
    try:
        bundle = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(str(path), None, None, f"not valid JSON ({exc})") from None
    if not isinstance(bundle, dict):
        raise DataError(str(path), None, None, "expected an object mapping official paths to their content")

    def read(rel: str) -> tuple[Any, str, str] | None:
        if rel not in bundle:
            return None
        text = json.dumps(bundle[rel], sort_keys=True)
        return bundle[rel], f"{path.name}:{rel}", hashlib.sha256(text.encode()).hexdigest()

    return read


def _validate(model: type[BaseModel], value: Any, label: str, row: int) -> Any:
    if not isinstance(value, dict):
        raise DataError(label, row, None, f"expected an object, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "unexpected field (not in the PrefEval schema)"
        raise DataError(label, row, field_path(tuple(first["loc"])) or None, message) from None


def _rows_of(value: Any, label: str) -> list[Any]:
    if not isinstance(value, list):
        raise DataError(label, None, None, f"expected a JSON list of rows, got {type(value).__name__}")
    return value


def flatten_distractors(conversations: Sequence[DistractorConversation], label: str) -> tuple[ChatTurn, ...]:
    """All distractor messages in file order, as the official code concatenates them; each
    conversation must alternate user, assistant, starting with the user."""
    out: list[ChatTurn] = []
    for i, conversation in enumerate(conversations):
        for j, message in enumerate(conversation.conversation):
            expected = "user" if j % 2 == 0 else "assistant"
            if message.role != expected:
                raise DataError(
                    label, i, f"conversation.{j}.role", f"expected {expected}, got {message.role}"
                )
        if len(conversation.conversation) % 2:
            raise DataError(label, i, "conversation", "ends on a user message (odd number of messages)")
        out.extend(conversation.conversation)
    return tuple(out)


def distractor_turns(distractors: Sequence[ChatTurn], turns: int) -> list[ChatTurn]:
    """The first ``turns`` (user, assistant) pairs of the distractor stream (the official rule)."""
    if turns < 0:
        raise ConfigError(f"inter turns must be >= 0, got {turns}")
    if 2 * turns > len(distractors):
        raise ConfigError(
            f"{turns} inter turns need {2 * turns} distractor messages; the data holds {len(distractors)}"
        )
    return list(distractors[: 2 * turns])


def _load(
    read: Reader,
    source: str,
    *,
    forms: Sequence[PreferenceForm],
    topics: Sequence[str] | None,
    need_mcq: bool | None,
    need_distractors: bool | None,
) -> LoadedPrefEval:
    """Rows of ``forms`` x ``topics`` (None: every topic file present). ``need_*``: True = the file
    must be there, None = read it when present, False = do not read it."""
    for form in forms:
        if form not in PREFERENCE_FORMS:
            raise ConfigError(f"unknown preference form {form!r} (choose from {', '.join(PREFERENCE_FORMS)})")
    files: dict[str, str] = {}
    rows: list[PrefEvalRow] = []
    wanted = list(topics) if topics else list(TOPICS)
    for topic in wanted:
        if topic not in TOPICS:
            raise ConfigError(f"unknown topic {topic!r} (the 20 PrefEval topics: {', '.join(TOPICS)})")
    found_any = False
    for topic in wanted:
        mcq_rows: list[McqRow] | None = None
        mcq_path = f"{MCQ_DIR}/{topic}.json"
        for form in forms:
            rel = f"{FORM_DIRS[form]}/{topic}.json"
            got = read(rel)
            if got is None:
                if topics:  # asked for by name: must be there
                    raise DataError(f"{source}/{rel}", None, None, "file not found")
                continue
            found_any = True
            value, label, digest = got
            files[rel] = digest
            raw = _rows_of(value, label)
            if need_mcq is not False and mcq_rows is None:
                got_mcq = read(mcq_path)
                if got_mcq is None and need_mcq:
                    raise DataError(
                        f"{source}/{mcq_path}", None, None, "file not found (needed for --task mcq)"
                    )
                if got_mcq is not None:
                    mcq_value, mcq_label, mcq_digest = got_mcq
                    files[mcq_path] = mcq_digest
                    mcq_rows = [
                        _validate(McqRow, r, mcq_label, i)
                        for i, r in enumerate(_rows_of(mcq_value, mcq_label))
                    ]
            if mcq_rows is not None and len(mcq_rows) != len(raw):
                raise DataError(
                    f"{source}/{mcq_path}",
                    None,
                    None,
                    f"{len(mcq_rows)} MCQ rows for {len(raw)} rows in {label}",
                )
            for i, item in enumerate(raw):
                row = _validate(ROW_TYPES[form], item, label, i)
                if mcq_rows is not None and mcq_rows[i].question != row.question:
                    raise DataError(
                        label, i, "question", f"differs from row {i} of {source}/{mcq_path} (the MCQ options)"
                    )
                rows.append(PrefEvalRow(form, topic, i, row, mcq_rows[i] if mcq_rows is not None else None))
    if not found_any:
        raise DataError(source, None, None, f"no PrefEval topic files for forms {', '.join(forms)}")
    distractors: tuple[ChatTurn, ...] = ()
    got = read(DISTRACTORS_FILE) if need_distractors is not False else None
    if got is None and need_distractors:
        raise DataError(f"{source}/{DISTRACTORS_FILE}", None, None, "file not found (needed for inter turns)")
    if got is not None:
        value, label, digest = got
        files[DISTRACTORS_FILE] = digest
        conversations = [
            _validate(DistractorConversation, c, label, i) for i, c in enumerate(_rows_of(value, label))
        ]
        distractors = flatten_distractors(conversations, label)
    return LoadedPrefEval(rows, distractors, source, _digest(files), files)


def _digest(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{p}:{d}\n" for p, d in sorted(files.items())).encode()).hexdigest()


def dataset_root(path: Path) -> Path:
    """``benchmark_dataset/`` of a checkout, or the directory itself when it is one."""
    inner = path / DATASET_DIR
    return inner if inner.is_dir() else path


def _file_source(path: Path) -> tuple[Path, PreferenceForm, str]:
    """The dataset root, form and topic of one topic file, from its place in the official layout."""
    topic = path.stem
    for form, folder in FORM_DIRS.items():
        parts = folder.split("/")
        if list(path.parent.parts[-len(parts) :]) == parts:
            root = path.parent
            for _ in parts:
                root = root.parent
            return root, form, topic
    raise DataError(
        str(path), None, None, "not in an official PrefEval folder (explicit_preference/, choice-based/, ...)"
    )


def fetch_data(*, client: httpx.Client | None = None) -> Path:
    """Download the official data files at the pinned commit into the cache (verified); returns the
    ``benchmark_dataset/`` directory there. Files already cached with the right hash are kept."""
    target, _ = fetch_source(DATA_SOURCE, client=client)
    return target / DATASET_DIR


def load_prefeval(
    source: str | Path = "fixture",
    *,
    forms: Sequence[PreferenceForm] = PREFERENCE_FORMS,
    topics: Sequence[str] | None = None,
    need_mcq: bool | None = None,
    need_distractors: bool | None = None,
    client: httpx.Client | None = None,
) -> LoadedPrefEval:
    """Load and validate PrefEval rows from `source` (see module docstring)."""
    text = str(source)

    def load(read: Reader, label: str, chosen: Sequence[str] | None = topics) -> LoadedPrefEval:
        return _load(
            read, label, forms=forms, topics=chosen, need_mcq=need_mcq, need_distractors=need_distractors
        )

    if text == "fixture":
        path = fixture_path(FIXTURE)
        loaded = load(_bundle_reader(path), f"fixture:{FIXTURE}")
        return LoadedPrefEval(loaded.rows, loaded.distractors, loaded.source, file_sha256(path), loaded.files)
    if text == "upstream":
        missing = [p for p in DATA_SOURCE.files if not (cache_dir(DATA_SOURCE) / p).is_file()]
        root = fetch_data(client=client) if missing else cache_dir(DATA_SOURCE) / DATASET_DIR
        loaded = load(_dir_reader(root), f"upstream:{pins.REPO}@{pins.COMMIT[:12]}")
        _check_pinned(loaded, root)
        return loaded
    path = Path(text)
    if path.is_dir():
        return load(_dir_reader(dataset_root(path)), str(path))
    if path.is_file():
        root, form, topic = _file_source(path)
        if topics and topic not in topics:
            raise ConfigError(f"{path} is topic {topic!r}, not one of --topic {', '.join(topics)}")
        return _load(
            _dir_reader(root),
            str(path),
            forms=[form],
            topics=[topic],
            need_mcq=need_mcq,
            need_distractors=need_distractors,
        )
    raise ConfigError(f"no PrefEval data at {path} (give fixture, upstream, a checkout or a topic file)")


def _check_pinned(loaded: LoadedPrefEval, root: Path) -> None:
    """Every file read from the cache still has its pinned sha256 (a cache edited by hand is refused)."""
    for rel, digest in loaded.files.items():
        expected = pins.DATA_FILES.get(rel)
        if expected is not None and expected != digest:
            raise DataError(
                str(root / rel), None, None, f"sha256 {digest} differs from the pinned {expected}"
            )


def describe_source(source: str | Path) -> tuple[str, str | None]:
    """The (source, sha256) `load_prefeval` reports for all forms and topics, without parsing the
    data; sha256 None for a local checkout (known only once read)."""
    text = str(source)
    if text == "fixture":
        return f"fixture:{FIXTURE}", file_sha256(fixture_path(FIXTURE))
    if text == "upstream":
        return f"upstream:{pins.REPO}@{pins.COMMIT[:12]}", _digest(dict(pins.DATA_FILES))
    return text, None

"""Official prompt files of an upstream repository, read at run time and verified by sha256.

Nothing here knows a benchmark: each benchmark declares one `UpstreamSource` (repository, pinned
commit, and the sha256 of every file it reads). The files come from a local checkout
(`--protocol-dir` or ``PERSONALIGN_PROTOCOL_DIR_<NAME>``) or from the cache that
`personalign protocol fetch <name>` fills. Every read is checked against the pinned hash, and
Python constants are read with `ast`, so upstream code is never executed.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from personalign.errors import ConfigError, PersonalignError
from personalign.userdirs import cache_root

if TYPE_CHECKING:  # httpx loads in ~40 ms; only `protocol fetch` needs it, not every CLI start
    import httpx

Protocol = Literal["paper", "personalign"]
PROTOCOLS: tuple[Protocol, ...] = ("paper", "personalign")

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ProtocolError(PersonalignError):
    """An official protocol file is missing, does not match its pinned sha256, or lacks a constant."""


def resolve_protocol(requested: str | None, official_data: bool) -> Protocol:
    """The protocol a run uses: the one asked for, else `paper` on official data, `personalign` otherwise."""
    if requested is None:
        return "paper" if official_data else "personalign"
    if requested not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {requested!r} (paper | personalign)")
    return requested


def protocol_label(label: str, protocol: str) -> str:
    """A report row/column label that names its protocol, e.g. ``gpt-4o [paper]``."""
    return f"{label} [{protocol}]"


@dataclass(frozen=True)
class UpstreamSource:
    """One upstream repository at a pinned commit and the sha256 of each file read from it.

    `files` maps a repository-relative path to its sha256; tests pass their own table.
    """

    name: str
    repo: str
    commit: str
    license: str
    files: Mapping[str, str]

    def __post_init__(self) -> None:
        if not _COMMIT.match(self.commit):
            raise ValueError(
                f"upstream {self.name}: commit must be 40 lowercase hex digits, got {self.commit!r}"
            )
        for path, digest in self.files.items():
            if not _SHA256.match(digest):
                raise ValueError(f"upstream {self.name}: sha256 of {path} is not 64 lowercase hex digits")

    @property
    def env_var(self) -> str:
        """The environment variable that points at a local checkout of this repository."""
        return "PERSONALIGN_PROTOCOL_DIR_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper())

    def raw_url(self, path: str) -> str:
        """Where `protocol fetch` downloads `path` at the pinned commit."""
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{path}"

    def fix_hint(self) -> str:
        """The sentence every ProtocolError ends with: which command makes the files available."""
        return (
            f"run `personalign protocol fetch {self.name}`, or pass --protocol-dir (or set {self.env_var}) "
            f"to a checkout of {self.repo} at commit {self.commit}"
        )


def protocol_cache_root() -> Path:
    """The protocols cache: ``<$PERSONALIGN_CACHE_DIR or $XDG_CACHE_HOME/personalign>/protocols``."""
    return cache_root() / "protocols"


def cache_dir(source: UpstreamSource) -> Path:
    """The cached copy of `source`: ``<cache root>/protocols/<name>/<commit>``."""
    return protocol_cache_root() / source.name / source.commit


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class UpstreamFiles:
    """Verified reads of one `UpstreamSource` from one directory; records what was read for the manifest."""

    source: UpstreamSource
    root: Path
    origin: str
    used: dict[str, str] = field(default_factory=dict)

    def read_bytes(self, path: str) -> bytes:
        """The bytes of `path`, after checking them against the pinned sha256."""
        expected = self.source.files.get(path)
        if expected is None:
            raise ProtocolError(
                f"{self.source.repo}: {path} is not pinned in the {self.source.name} protocol "
                "(no sha256 declared)"
            )
        file = self.root / path
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise ProtocolError(
                f"{self.source.name} protocol file {path} is missing from {self.root} ({self.origin}); "
                f"{self.source.fix_hint()}"
            ) from None
        except OSError as exc:
            raise ProtocolError(f"{self.source.name} protocol file {file}: cannot read ({exc})") from None
        actual = sha256_bytes(data)
        if actual != expected:
            raise ProtocolError(
                f"{self.source.name} protocol file {file} has sha256 {actual}, expected {expected} "
                f"({self.source.repo} at {self.source.commit}); {self.source.fix_hint()}"
            )
        self.used[path] = actual
        return data

    def text(self, path: str) -> str:
        """The verified file as UTF-8 text."""
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"{self.source.name} protocol file {path}: not UTF-8 ({exc})") from None

    def yaml(self, path: str) -> Any:
        """The verified file parsed with ``yaml.safe_load``."""
        import yaml

        try:
            return yaml.safe_load(self.text(path))
        except yaml.YAMLError as exc:
            raise ProtocolError(f"{self.source.name} protocol file {path}: invalid YAML ({exc})") from None

    def yaml_mapping(self, path: str, *keys: str) -> dict[str, Any]:
        """A YAML file that must be a mapping holding `keys`; a missing key names the file and key."""
        value = self.yaml(path)
        if not isinstance(value, dict):
            raise ProtocolError(f"{self.source.name} protocol file {path}: expected a YAML mapping")
        for key in keys:
            if key not in value:
                raise ProtocolError(f"{self.source.name} protocol file {path}: no key {key!r}")
        return value

    def constant(self, path: str, name: str) -> Any:
        """The literal value assigned to the top-level name `name` in a Python file, read with `ast`."""
        text = self.text(path)
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as exc:
            raise ProtocolError(
                f"{self.source.name} protocol file {path}: not valid Python ({exc})"
            ) from None
        for node in tree.body:
            value: ast.expr | None = None
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(target, ast.Name) and target.id == name for target in node.targets)
            ) or (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
            ):
                value = node.value
            if value is not None:
                try:
                    return ast.literal_eval(value)
                except ValueError as exc:
                    raise ProtocolError(
                        f"{self.source.name} protocol file {path}: constant {name} is not a literal ({exc})"
                    ) from None
        raise ProtocolError(f"{self.source.name} protocol file {path}: no top-level constant {name}")

    def manifest(self) -> dict[str, Any]:
        """What a run manifest records: repository, commit, licence, and the sha256 of each file read."""
        return {
            "name": self.source.name,
            "repo": self.source.repo,
            "commit": self.source.commit,
            "license": self.source.license,
            "origin": self.origin,
            "files": dict(sorted(self.used.items())),
        }


def open_upstream(source: UpstreamSource, protocol_dir: Path | str | None = None) -> UpstreamFiles:
    """The files of `source`: `protocol_dir`, else ``$PERSONALIGN_PROTOCOL_DIR_<NAME>``, else the cache."""
    if protocol_dir is not None:
        root, origin = Path(protocol_dir), "--protocol-dir"
    elif os.environ.get(source.env_var):
        root, origin = Path(os.environ[source.env_var]), f"${source.env_var}"
    else:
        root, origin = cache_dir(source), "cache"
    if not root.is_dir():
        raise ProtocolError(
            f"{source.name} protocol: {root} ({origin}) is not a directory; {source.fix_hint()}"
        )
    return UpstreamFiles(source=source, root=root, origin=origin)


def verify_all(files: UpstreamFiles) -> dict[str, str]:
    """Read every pinned file once; raises the first ProtocolError. Returns path -> sha256."""
    for path in files.source.files:
        files.read_bytes(path)
    return dict(files.used)


def fetch_source(
    source: UpstreamSource, *, client: httpx.Client | None = None, timeout: float = 30.0
) -> tuple[Path, list[str]]:
    """Download each pinned file of `source` into the cache, verified, atomically.

    Files already cached with the right hash are kept. Returns the cache directory and the paths
    that were downloaded.
    """
    import httpx

    target = cache_dir(source)
    downloaded: list[str] = []
    own_client = client is None
    http = client or httpx.Client(timeout=timeout, follow_redirects=True)
    try:
        for path, expected in source.files.items():
            dest = target / path
            if dest.is_file() and sha256_bytes(dest.read_bytes()) == expected:
                continue
            url = source.raw_url(path)
            try:
                response = http.get(url)
            except httpx.HTTPError as exc:
                raise ProtocolError(f"{source.name} protocol: cannot download {url} ({exc})") from None
            if response.status_code != 200:
                raise ProtocolError(f"{source.name} protocol: {url} answered HTTP {response.status_code}")
            data = response.content
            actual = sha256_bytes(data)
            if actual != expected:
                raise ProtocolError(
                    f"{source.name} protocol: {url} has sha256 {actual}, expected {expected}; not cached"
                )
            _write_atomic(dest, data)
            downloaded.append(path)
    finally:
        if own_client:
            http.close()
    return target, downloaded


def _write_atomic(dest: Path, data: bytes) -> None:
    """Write through a temporary file in the same directory and rename, so a reader never sees half a file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

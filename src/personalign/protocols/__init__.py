"""Evaluation protocols: `personalign` (our prompts) or `paper` (the official prompt files, pinned).

`upstream` reads an upstream repository's files at a pinned commit, verified by sha256; each
benchmark declares its own `UpstreamSource`.
"""

from personalign.protocols.upstream import (
    PROTOCOLS,
    Protocol,
    ProtocolError,
    UpstreamFiles,
    UpstreamSource,
    cache_dir,
    fetch_source,
    open_upstream,
    protocol_cache_root,
    protocol_label,
    resolve_protocol,
    verify_all,
)

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "ProtocolError",
    "UpstreamFiles",
    "UpstreamSource",
    "cache_dir",
    "fetch_source",
    "open_upstream",
    "protocol_cache_root",
    "protocol_label",
    "resolve_protocol",
    "verify_all",
]

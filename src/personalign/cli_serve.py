"""`personalign serve`: run the OpenAI-compatible personalization gateway; `serve keys ...`: its API keys."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from personalign.cli_common import console, fail, new_app
from personalign.errors import ConfigError, PersonalignError
from personalign.redact import safe

DEFAULT_KEYS = Path(os.environ.get("PERSONALIGN_GATEWAY_KEYS", "~/.config/personalign/gateway-keys.jsonl"))
KeysOpt = Annotated[
    Path, typer.Option("--keys", help="Keys file (JSON Lines of hashed keys; $PERSONALIGN_GATEWAY_KEYS).")
]


def register(app: typer.Typer) -> None:
    """Add `serve` (and `serve keys add|list|revoke`) to the `personalign` app."""
    serve_app = new_app(help="The OpenAI-compatible personalization gateway (docs/serve.md).")
    keys_app = new_app(no_args_is_help=True, help="Manage the gateway's API keys (stored hashed).")
    serve_app.add_typer(keys_app, name="keys")
    app.add_typer(serve_app, name="serve")

    @serve_app.callback(invoke_without_command=True)
    def serve(
        ctx: typer.Context,
        upstream: Annotated[
            list[str] | None,
            typer.Option(
                "--upstream",
                help="Upstream model spec, or NAME=SPEC (repeatable; the first is the default model).",
            ),
        ] = None,
        store: Annotated[
            str,
            typer.Option(
                help="Memory store: a SQLite file path, sqlite:///PATH, :memory:, or postgresql://... "
                "(several replicas may share one PostgreSQL store)."
            ),
        ] = "gateway-memory.sqlite",
        keys: KeysOpt = DEFAULT_KEYS,
        host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
        embedder: Annotated[
            str,
            typer.Option(
                help="Dense embedder: minilm (offline), minilm-q8 (MiniLM with int8 matmuls, ~2x faster; "
                "quant extra), static (fastest, distilled; static extra), hash, none, st:<name>."
            ),
        ] = "minilm",
        extractor: Annotated[
            str | None,
            typer.Option(help="Model spec that extracts memories in the background (default: none)."),
        ] = None,
        judge: Annotated[
            str | None, typer.Option(help="Model spec deciding which preferences apply (default: apply all).")
        ] = None,
        k_sessions: Annotated[int, typer.Option(help="Sessions retrieved per request.")] = 3,
        k_memories: Annotated[int, typer.Option(help="Memories retrieved per request.")] = 8,
        workers: Annotated[int, typer.Option(help="Concurrent extraction jobs.")] = 2,
        indexed_users: Annotated[
            int, typer.Option(help="Users' search indexes kept in memory per tenant (least recent evicted).")
        ] = 4096,
    ) -> None:
        """Serve /v1/chat/completions, /v1/models and the memory API (/v1/memory/...) on HOST:PORT."""
        if ctx.invoked_subcommand:
            return
        import uvicorn

        from personalign.serve import GatewayConfig, KeyRing, create_app
        from personalign.serve.observe import JsonFormatter
        from personalign.serve.server import UVICORN_OPTIONS

        try:
            if not upstream:
                raise ConfigError("give at least one --upstream model spec")
            path = keys.expanduser()
            ring = KeyRing.load(path)
            if not len(ring):
                raise ConfigError(
                    f"no API keys in {path}; add one with `personalign serve keys add --tenant NAME`"
                )
            config = GatewayConfig(
                upstreams=upstream,
                keys=ring,
                store=store,
                embedder=None if embedder == "none" else embedder,
                extractor=extractor,
                judge=judge,
                k_sessions=k_sessions,
                k_memories=k_memories,
                extraction_workers=workers,
                indexed_users=indexed_users,
            )
            app_ = create_app(config)
        except PersonalignError as exc:
            fail(exc)
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        logger = logging.getLogger("personalign.serve")
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        console.print(f"personalign gateway on http://{host}:{port}/v1 (store {safe(config.store)})")
        uvicorn.run(app_, host=host, port=port, **UVICORN_OPTIONS)

    @keys_app.command("add")
    def keys_add(
        tenant: Annotated[str, typer.Option(help="The tenant this key acts for.")],
        keys: KeysOpt = DEFAULT_KEYS,
        rate: Annotated[float, typer.Option(help="Requests per second (sustained).")] = 10.0,
        burst: Annotated[int, typer.Option(help="Requests allowed at once.")] = 20,
        default_user: Annotated[
            str | None, typer.Option(help="User for requests that name none (e.g. a benchmark client).")
        ] = None,
    ) -> None:
        """Create a key; print it once on stdout (only its salted hash is stored)."""
        from personalign.serve import KeyRing, new_key

        try:
            path = keys.expanduser()
            ring = KeyRing.load(path)
            key, record = new_key(tenant, rate=rate, burst=burst, default_user=default_user)
            ring.add(record)
            ring.save(path)
        except PersonalignError as exc:
            fail(exc)
        console.print(f"key {record.key_id} for tenant {tenant!r} added to {path}; it is shown only now:")
        typer.echo(key)

    @keys_app.command("list")
    def keys_list(keys: KeysOpt = DEFAULT_KEYS) -> None:
        """List key ids, tenants and limits (never a secret)."""
        from personalign.serve import KeyRing

        try:
            ring = KeyRing.load(keys.expanduser())
        except PersonalignError as exc:
            fail(exc)
        for k in ring.records():
            typer.echo(json.dumps({"key_id": k.key_id, "tenant": k.tenant, "rate": k.rate, "burst": k.burst,
                                   "default_user": k.default_user, "revoked": k.revoked}))  # fmt: skip

    @keys_app.command("revoke")
    def keys_revoke(key_id: Annotated[str, typer.Argument(help="The key id (see `keys list`).")],
                    keys: KeysOpt = DEFAULT_KEYS) -> None:  # fmt: skip
        """Revoke a key (kept in the file, refused from then on; restart the gateway to apply)."""
        from dataclasses import replace

        from personalign.serve import KeyRing

        try:
            path = keys.expanduser()
            ring = KeyRing.load(path)
            found = next((k for k in ring.records() if k.key_id == key_id), None)
            if found is None:
                raise ConfigError(f"no key {key_id!r} in {path}")
            ring.add(replace(found, revoked=True))
            ring.save(path)
        except PersonalignError as exc:
            fail(exc)
        console.print(f"key {key_id} revoked")

"""Run the gateway with uvicorn: in a background thread on a free port (tests, benchmarks)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI

from personalign.serve.app import GatewayConfig, create_app

# log_config=None leaves the host's logging alone; lifespan on closes models and the worker.
UVICORN_OPTIONS: dict[str, Any] = dict(lifespan="on", access_log=False, log_config=None)


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening-ready socket (port 0: a free one), with TCP_NODELAY applied by asyncio."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class GatewayServer:
    """The gateway on a loopback port in a thread; use as a context manager."""

    def __init__(
        self, config: GatewayConfig, *, host: str = "127.0.0.1", port: int = 0, **options: Any
    ) -> None:
        self.app: FastAPI = create_app(config)
        self._sock = bind(host, port)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.base_url = f"{self.url}/v1"
        self._server = uvicorn.Server(uvicorn.Config(self.app, **{**UVICORN_OPTIONS, **options}))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="gateway", daemon=True
        )

    def start(self) -> GatewayServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("gateway failed to start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()

    def __enter__(self) -> GatewayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""A real PostgreSQL server for tests, started from the system's binaries in a temporary directory.

``initdb`` into a fresh directory, ``pg_ctl start`` on a free loopback port (socket in the same
directory), stopped at the end by the postmaster's PID. As root (CI), the server runs as the
``postgres`` system user, since PostgreSQL refuses to run as root. Fixtures (registered by
tests/conftest.py): ``postgres_server`` (one per test session) and ``postgres_url`` (a fresh,
empty database per test). Tests using them are skipped, with the reason, when ``initdb`` or
psycopg is missing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Debian/Ubuntu keep the server binaries off PATH; newest version first.
SEARCH_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name, reverse=True)


def pg_bin_dir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: the Debian server directory, else PATH."""
    for directory in SEARCH_DIRS:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found and shutil.which("pg_ctl") else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """A running server: ``url`` is its maintenance database (``postgres``) over TCP."""

    port: int
    directory: Path
    pid: int
    start: list[str]
    run_as: dict[str, Any]
    user: str = "personalign"

    def restart(self, timeout: float = 60.0) -> None:
        """Stop the server (fast shutdown: clients are disconnected) and start it again, same port."""
        _stop(self.pid)
        subprocess.run(
            self.start, check=True, capture_output=True, timeout=timeout, cwd=self.directory, **self.run_as
        )
        self.pid = int((self.directory / "data" / "postmaster.pid").read_text().splitlines()[0])

    def url_for(self, database: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)


def _run_as() -> dict[str, Any]:
    """subprocess options: as root, run the server as the unprivileged ``postgres`` user."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        entry = pwd.getpwnam("nobody")
    return {"user": entry.pw_uid, "group": entry.pw_gid}


@contextlib.contextmanager
def postgres_server(timeout: float = 60.0) -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server; stop it by PID and remove its directory afterwards."""
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found")
    directory = Path(tempfile.mkdtemp(prefix="personalign-pg-"))
    data, log = directory / "data", directory / "server.log"
    options = _run_as()
    if options:
        os.chown(directory, options["user"], options["group"])
    port = free_port()
    pid = 0
    server: PostgresServer | None = None
    try:
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", "personalign", "--auth=trust",
             "--encoding=UTF8", "--no-locale", "--no-sync"],
            check=True, capture_output=True, timeout=timeout, cwd=directory, **options,
        )  # fmt: skip
        server_options = (
            f"-k {directory} -p {port} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        start = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", str(int(timeout)),
                 "-o", server_options, "start"]  # fmt: skip
        subprocess.run(start, check=True, capture_output=True, timeout=timeout + 10, cwd=directory, **options)
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        server = PostgresServer(port=port, directory=directory, pid=pid, start=start, run_as=options)
        yield server
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace")[-2000:]
        if log.exists():
            detail += log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"PostgreSQL did not start: {detail}") from None
    finally:
        pid = server.pid if server is not None else pid  # a restart changes it
        if pid:
            _stop(pid)
        shutil.rmtree(directory, ignore_errors=True)


def _stop(pid: int, timeout: float = 30.0) -> None:
    """Fast shutdown (SIGINT) of the postmaster, then SIGKILL if it lingers."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


_names = itertools.count()


@pytest.fixture(scope="session")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    if pg_bin_dir() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed; see .ci/run")
    pytest.importorskip("psycopg", reason="psycopg is not installed (the serve or dev extra)")
    with postgres_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server_fixture: PostgresServer) -> str:
    """The URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server_fixture.create_database(f"test_{os.getpid()}_{next(_names)}")

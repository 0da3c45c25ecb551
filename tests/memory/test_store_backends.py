"""Both stores: tenants, hostile user ids, deleting and exporting a user, migrations, URLs, dense search."""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from personalign.errors import ConfigError, DataError
from personalign.memory import MemoryBackend, MemoryEngine, MemoryStore, UnknownUserError, open_store

MakeStore = Callable[..., MemoryBackend]
V1_STORE = Path(__file__).parent / "data" / "store_v1.sqlite"  # written by the first store (schema 1)
CHAT = [
    {"role": "user", "content": "Write the update for Professor Ines Okafor."},
    {"role": "assistant", "content": "Here is a draft."},
    {"role": "user", "content": "Lead with the raw counts, no interpretation."},
]


def vec(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def fill(store: MemoryBackend, user_id: str) -> None:
    """Give ``user_id`` a bit of everything: sessions, vectors, superseded memories, extraction rows."""
    store.add_user(user_id)
    s1 = store.add_session(user_id, CHAT, timestamp=1.0, external_id="a", vectors={"e": vec(1, 0)})
    s2 = store.add_session(user_id, CHAT[:1], timestamp=2.0, metadata={"k": [1, 2]})
    store.add_memories(
        user_id, [{"content": "Lead with counts.", "context_factor": "Okafor"}], session_id=s1, extractor="x"
    )
    m = store.add_memory(user_id, "Lead with the summary.", context_factor="okafor", session_id=s2)
    store.add_memory(user_id, "Lives by the sea.", kind="fact")
    store.record_extraction_error(user_id, s2, "x", "reply truncated")
    store.put_vectors(user_id, "m", "e", {m.id: vec(0, 1)})


# --- tenants and isolation ---------------------------------------------------------------------


def test_tenants_are_isolated(make_store: MakeStore) -> None:
    root = make_store()
    acme = root.tenant_view("acme")
    assert (root.tenant, acme.tenant) == ("default", "acme")
    fill(root, "ana")
    root.add_user("ben")
    acme.add_user("ana", exist_ok=False)  # the same id in another tenant is another user
    with pytest.raises(ConfigError, match="already exists"):
        root.add_user("ana", exist_ok=False)
    own = acme.add_session("ana", CHAT[:1], timestamp=5.0)
    assert [s.id for s in acme.sessions("ana")] == [own]
    assert len(root.sessions("ana")) == 2 and acme.memories("ana") == []
    assert root.users() == ["ana", "ben"] and acme.users() == ["ana"]
    assert (root.count_sessions(), acme.count_sessions()) == (2, 1)
    # nothing of the default tenant is reachable through acme
    with pytest.raises(UnknownUserError):
        acme.sessions("ben")
    assert not acme.has_user("ben")
    root_session = root.sessions("ana")[0].id
    with pytest.raises(DataError, match="no session"):
        acme.add_memory("ana", "x", session_id=root_session)
    with pytest.raises(DataError, match="no session"):
        acme.record_extraction_error("ana", root_session, "x", "boom")
    assert acme.vectors("ana", "s", "e", [root_session]) == {}
    assert acme.search_vectors("ana", "s", "e", vec(1, 0), 5) == []
    assert acme.extraction_errors("ana", "x") == {}
    # deleting acme's ana leaves the default tenant's ana whole
    before = root.export_user("ana")
    acme.delete_user("ana")
    assert root.export_user("ana") == before
    assert root.check() == []
    with pytest.raises(DataError, match="tenant"):
        root.tenant_view("")


HOSTILE = [
    "o'brien",
    'x"; DROP TABLE users; --',
    "'; DELETE FROM sessions WHERE '1'='1",
    "../../etc/passwd",
    "..\\..\\windows",
    "ユーザー🙂",
    "%",
    "_",
    "?",
    "%s",
    "$1",
    " ana",
    "ANA",
    "a" * 200,
]


def test_hostile_user_ids_are_opaque_data(make_store: MakeStore, tmp_path: Path) -> None:
    store = make_store()
    store.add_user("ana")
    store.add_session("ana", CHAT)
    files = sorted(p.name for p in tmp_path.iterdir())
    for user_id in HOSTILE:
        store.add_user(user_id)
        store.add_session(user_id, [{"role": "user", "content": f"I am {user_id}"}])
        store.add_memory(user_id, f"memory of {user_id}")
    assert sorted(store.users()) == sorted([*HOSTILE, "ana"])
    for user_id in HOSTILE:
        assert [s.turns[0].content for s in store.sessions(user_id)] == [f"I am {user_id}"]
        assert [m.content for m in store.memories(user_id)] == [f"memory of {user_id}"]
    assert len(store.sessions("ana")) == 1  # untouched by "%", "_", " ana", "ANA"...
    assert store.check() == [] and store.row_counts()["users"] == len(HOSTILE) + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # no id became a file
    # 10 KB ids: refused on write, unknown on read, nothing stored
    huge = "x'; --" * 1700
    with pytest.raises(DataError, match="user_id"):
        store.add_user(huge)
    assert not store.has_user(huge)
    for read in (store.sessions, store.memories, store.history, store.export_user, store.delete_user):
        with pytest.raises(UnknownUserError):
            read(huge)
    # one hostile id deleted: only its rows go
    store.delete_user('x"; DROP TABLE users; --')
    assert len(store.users()) == len(HOSTILE) and store.check() == []


def test_a_nul_in_an_id_or_text_is_refused_where_the_store_cannot_hold_it(make_store: MakeStore) -> None:
    store = make_store()
    store.add_user("ana")
    if getattr(store, "allows_nul", True):
        pytest.skip("SQLite stores NUL characters as text")
    with pytest.raises(DataError, match=r"field 'user_id'.*NUL"):
        store.add_user("a\x00b")
    with pytest.raises(DataError, match=r"row 0, field 'content'.*NUL"):
        store.add_session("ana", [{"role": "user", "content": "a\x00b"}])
    assert not store.has_user("a\x00b")
    with pytest.raises(UnknownUserError):
        store.sessions("a\x00b")
    assert store.count_sessions("ana") == 0


# --- deleting and exporting a user ---------------------------------------------------------------


def test_delete_user_removes_every_row_of_theirs(make_store: MakeStore) -> None:
    store = make_store()
    fill(store, "ben")
    ben = store.export_user("ben")
    before = store.row_counts()
    fill(store, "victim")
    assert all(store.row_counts()[t] > before[t] for t in before)  # the victim has rows everywhere
    deleted = store.delete_user("victim")
    assert store.row_counts() == before  # nothing of the victim's remains, in any table
    assert deleted["users"] == 1 and deleted["sessions"] == 2 and deleted["memories"] == 3
    assert not store.has_user("victim") and store.users() == ["ben"]
    with pytest.raises(UnknownUserError):
        store.sessions("victim")
    assert store.export_user("ben") == ben and store.check() == []
    # the same id added again is a new, empty user
    store.add_user("victim")
    assert store.sessions("victim") == [] and store.memories("victim", include_superseded=True) == []


def test_an_engine_forgets_a_user_deleted_and_re_added_elsewhere(make_store: MakeStore) -> None:
    """A replica's cached index must not serve a deleted user's sessions to the re-added user, even
    when the new user's revision counter equals the old one."""
    engine = MemoryEngine(make_store(), embedder="hash")
    other_replica = make_store()
    engine.add_user("ana")
    engine.add_session("ana", [{"role": "user", "content": "old secret about the lighthouse"}])
    assert len(engine.retrieve("ana", "lighthouse").sessions) == 1
    other_replica.delete_user("ana")
    other_replica.add_user("ana")
    other_replica.add_session("ana", [{"role": "user", "content": "new life in the mountains"}])
    found = engine.retrieve("ana", "lighthouse mountains")
    assert [s.text for s in found.sessions] == ["user: new life in the mountains"]


def test_export_user_holds_all_their_data_as_json(make_store: MakeStore) -> None:
    store = make_store()
    fill(store, "ana")
    fill(store, "ben")
    data = json.loads(json.dumps(store.export_user("ana")))
    assert data["user_id"] == "ana" and data["tenant"] == "default"
    assert [s["external_id"] for s in data["sessions"]] == ["a", None]
    assert data["sessions"][0]["turns"][2] == {"index": 2, "role": "user", "content": CHAT[2]["content"]}
    assert data["sessions"][1]["metadata"] == {"k": [1, 2]}
    memories = {m["content"]: m for m in data["memories"]}
    assert set(memories) == {"Lead with counts.", "Lead with the summary.", "Lives by the sea."}
    assert memories["Lead with counts."]["superseded_by"] == memories["Lead with the summary."]["id"]
    assert [h["event"] for h in data["history"]].count("superseded") == 1
    assert sorted((x["status"], x["error"]) for x in data["extractions"]) == [
        ("error", "reply truncated"),
        ("ok", None),
    ]
    assert sorted((v["unit"], v["vector"]) for v in data["vectors"]) == [("m", [0.0, 1.0]), ("s", [1.0, 0.0])]
    assert data["revision"] == store.revision("ana")
    ben_ids = {s.id for s in store.sessions("ben")}
    assert not ben_ids & {s["id"] for s in data["sessions"]}


# --- dense search --------------------------------------------------------------------------------


def test_search_vectors_is_exact_cosine_within_the_user(make_store: MakeStore) -> None:
    store = make_store()
    store.add_user("ana")
    store.add_user("ben")
    ids = [
        store.add_session("ana", CHAT[:1], vectors={"e": v})
        for v in (vec(1, 0, 0), vec(0.6, 0.8, 0), vec(0, 0, 2), vec(0, 0, 0))
    ]
    store.add_session("ben", CHAT[:1], vectors={"e": vec(1, 0, 0)})
    hits = store.search_vectors("ana", "s", "e", vec(2, 0, 0), 3)
    assert [i for i, _ in hits] == [ids[0], ids[1], ids[2]]
    assert [round(s, 6) for _, s in hits] == [1.0, 0.6, 0.0]
    assert store.search_vectors("ana", "s", "other", vec(1, 0, 0), 3) == []


# --- migrations and opening ----------------------------------------------------------------------


def test_a_store_written_by_the_first_version_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(V1_STORE, path)
    store = MemoryStore(path)
    assert (store.migrated_from, store.schema_version()) == (1, 2)
    assert store.users() == ["ana", "ben"] and store.check() == []
    assert (store.revision("ana"), store.revision("ben")) == (5, 2)
    ana = store.sessions("ana")
    assert [s.external_id for s in ana] == ["s1", None] and ana[0].metadata == {"topic": "update"}
    assert [t.content for t in ana[0].turns][2] == "Lead with raw counts."
    every = store.memories("ana", include_superseded=True)
    assert [(m.content, m.current) for m in every] == [
        ("Lead with raw counts", False),
        ("Use bullet points", True),
        ("Lives in Lisbon", True),
    ]
    assert every[0].superseded_by == every[1].id and every[0].evidence_turns == (2,)
    assert store.vectors("ana", "s", "hash:4", [ana[0].id])[ana[0].id].tolist() == [1, 0, 0, 0]
    assert store.vectors("ana", "m", "hash:4", [every[0].id])[every[0].id].tolist() == [0, 1, 0, 0]
    assert store.extraction_errors("ana", "stub") == {ana[1].id: "reply truncated"}
    assert store.pending_extraction("ana", "stub") == [ana[1].id]
    assert [m.content for m in store.memories("ben")] == ["Likes tables"]
    assert [e["event"] for e in store.history("ana")].count("superseded") == 1
    # it keeps working: new rows get new ids, and opening again migrates nothing
    new = store.add_session("ana", CHAT)
    assert new > max(s.id for s in ana)
    store.close()
    again = MemoryStore(path)
    assert again.migrated_from == 2 and again.count_sessions("ana") == 3 and again.check() == []
    again.close()


def test_a_store_from_a_newer_personalign_is_refused(make_store: MakeStore, store_url: str) -> None:
    store = make_store()
    store.add_user("ana")
    ours = store.schema_version()
    with store._write() as tx:  # type: ignore[attr-defined]
        tx.run("INSERT INTO schema_version VALUES (?, ?, ?)", (ours + 1, 0.0, "from the future"))
    with pytest.raises(ConfigError, match=f"schema version {ours + 1}"):
        open_store(store_url)


T = TypeVar("T")


def open_at_once(open_one: Callable[[], T], n: int) -> tuple[list[T], list[BaseException]]:
    """Call `open_one` from `n` threads started together; what they opened and what they raised."""
    opened: list[T] = []
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            opened.append(open_one())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return opened, errors


def test_concurrent_openers_migrate_once(make_store: MakeStore) -> None:
    stores, errors = open_at_once(make_store, 6)
    assert errors == [] and len(stores) == 6
    rows = stores[0]._read("SELECT version FROM schema_version ORDER BY version")  # type: ignore[attr-defined]
    assert [r[0] for r in rows] == list(range(1, stores[0].schema_version() + 1))
    assert sorted(s.migrated_from for s in stores).count(0) == 1  # type: ignore[attr-defined]


def test_open_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from personalign.memory.store_pg import redact

    monkeypatch.chdir(tmp_path)
    cases: list[tuple[str | Path, Path]] = [
        (tmp_path / "a.sqlite", tmp_path / "a.sqlite"),
        (str(tmp_path / "b.sqlite"), tmp_path / "b.sqlite"),
        ("sqlite:///rel/c.sqlite", tmp_path / "rel" / "c.sqlite"),
        (f"sqlite:///{tmp_path}/e.sqlite", tmp_path / "e.sqlite"),  # tmp_path is absolute: 4 slashes
    ]
    for target, path in cases:
        store = open_store(target)
        assert isinstance(store, MemoryStore)
        store.add_user("ana")
        store.close()
        assert path.exists(), target
    memory = open_store("sqlite://")
    memory.add_user("ana")
    assert memory.users() == ["ana"]
    for bad in ("mysql://u@h/db", "sqlite:relative.db"):
        with pytest.raises(ConfigError):
            open_store(bad)
    with pytest.raises(ConfigError, match="PostgreSQL"):
        open_store(tmp_path / "f.sqlite", pool_size=3)
    with pytest.raises(ConfigError, match="as text"):
        open_store(Path("postgresql://me@db:5432/mem"))  # Path() has made it postgresql:/me@db...
    assert "secret" not in redact("postgresql://me:secret@db.example:5433/mem")
    assert redact("postgresql://me:secret@db.example:5433/mem") == "postgresql://me:***@db.example:5433/mem"


def test_an_engine_opens_any_store_url_for_a_tenant(store_url: str) -> None:
    engine = MemoryEngine(store_url, embedder="hash", tenant="acme")
    assert engine.store.tenant == "acme"
    engine.add_user("ana")
    engine.add_session("ana", CHAT)
    assert [s.session.turns[0].content for s in engine.retrieve("ana", "Okafor").sessions if s.session] == [
        CHAT[0]["content"]
    ]
    default = open_store(store_url)
    assert default.users() == [] and default.tenant_view("acme").users() == ["ana"]
    default.close()
    engine.close()


def test_an_unreachable_postgres_is_a_config_error_without_the_password() -> None:
    from tests.support.postgres import free_port

    url = f"postgresql://me:hunter2@127.0.0.1:{free_port()}/mem"
    with pytest.raises(ConfigError, match="cannot open the memory store") as info:
        open_store(url, timeout=2)
    assert "hunter2" not in str(info.value)


def test_a_postgres_store_survives_a_server_restart() -> None:
    """Pooled connections die with the server; the next call must get a live one, not an error."""
    pytest.importorskip("psycopg")
    from tests.support.postgres import pg_bin_dir, postgres_server

    if pg_bin_dir() is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with postgres_server() as server:
        store = open_store(server.create_database("restart"), pool_size=2)
        store.add_user("ana")
        store.add_session("ana", CHAT)
        server.restart()
        assert store.count_sessions("ana") == 1  # a read on a fresh connection
        store.add_session("ana", CHAT)  # and a write
        assert store.count_sessions("ana") == 2
        store.close()


def test_a_pooled_connection_the_server_terminated_is_replaced_without_an_error(postgres_url: str) -> None:
    """Connections killed one by one (an idle timeout, ``pg_terminate_backend``): the pool's check
    sees the closed socket on checkout (no round trip) and hands out a live connection."""
    store: Any = open_store(postgres_url, pool_size=2)
    store.add_user("ana")
    store.add_session("ana", CHAT)
    # each backend is waited for until it has exited (closed its socket), as one killed while its
    # connection sat idle in the pool (a kill between checkout and use: see the retry tests below)
    terminate_backends(postgres_url)
    assert store.count_sessions("ana") == 1  # a multi-statement read
    assert store.has_user("ana")  # a one-statement read
    assert store.read_retries == 0  # the checkout check replaced them, not the read's retry
    store.add_session("ana", CHAT)  # a pipelined write
    assert store.count_sessions("ana") == 2
    store.close()


def test_the_pool_check_discards_a_connection_with_anything_to_read() -> None:
    """The checkout check reads nothing from the server: an idle connection's socket is silent;
    a readable one (the server's goodbye, or EOF) is closed so the pool replaces it."""
    import socket

    from personalign.memory.store_pg import check_idle

    class Conn:
        OperationalError = RuntimeError
        broken = False

        def __init__(self, sock: socket.socket) -> None:
            self.sock, self.closed = sock, False

        def fileno(self) -> int:
            return self.sock.fileno()

        def close(self) -> None:
            self.closed = True

    ours, server = socket.socketpair()
    conn = Conn(ours)
    check_idle(conn)  # nothing to read: kept
    assert not conn.closed
    server.sendall(b"E")  # the server wrote while the connection sat idle (a FATAL, then EOF)
    with pytest.raises(RuntimeError, match="closed or wrote"):
        check_idle(conn)
    assert conn.closed
    with pytest.raises(RuntimeError, match="closed"):
        check_idle(conn)
    ours.close()
    server.close()


# --- a connection lost between checkout and use: reads retried once, writes never ----------------


def terminate_backends(url: str) -> None:
    """Terminate every other backend of ``url``'s database, each waited for until it has exited."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert killed and all(done for (done,) in killed)  # the pool's connection was there to kill


@pytest.fixture
def unchecked(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """A PostgreSQL store (and its URL, with a password) whose pool hands out its one connection
    without the checkout check: a backend terminated while it sits in the pool is then a backend
    killed in the instant between checkout and use, which no checkout check can see."""
    from personalign.memory import store_pg

    monkeypatch.setattr(store_pg, "check_idle", lambda conn: None)  # read when the pool is made
    url = postgres_url.replace("://personalign@", "://personalign:hunter2@")  # trust auth: unused
    store = open_store(url, pool_size=1)
    store.add_user("ana")
    store.add_session("ana", CHAT, timestamp=1.0, vectors={"e": vec(1, 0)})
    store.add_memory("ana", "Lead with counts.", context_factor="Okafor")
    yield store, url
    store.close()


def count_checkouts(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One item per connection taken from the store's pool from now on."""
    pool = store._shared.pool
    taken: list[int] = []
    checkout = pool.connection

    def counted(*args: Any, **kwargs: Any) -> Any:
        taken.append(1)
        return checkout(*args, **kwargs)

    monkeypatch.setattr(pool, "connection", counted)
    return taken


@pytest.mark.parametrize("read", ["user_version", "catch_up", "catch_up_snapshot", "sessions"])
def test_a_read_on_a_connection_killed_before_use_is_retried_once(
    unchecked: tuple[Any, str],
    read: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backend killed between checkout and use fails the read's first round trip: the read runs
    again on another connection and the lost one leaves the pool. One test per read path: a
    one-statement read (``_read``), a catch-up whose version check meets the kill, a catch-up whose
    pipelined snapshot (``_read_many``) meets it, and a multi-statement snapshot (``_read_tx``)."""
    store, url = unchecked
    version = store.user_version("ana")
    session = store.sessions("ana")[0]
    before = store._shared.pool.get_stats().get("returns_bad", 0)
    taken = count_checkouts(store, monkeypatch)
    if read == "catch_up_snapshot":  # the kill after the version check, before the snapshot
        check_version = store.user_version

        def then_kill(user_id: str) -> tuple[int, int]:
            found = check_version(user_id)
            terminate_backends(url)
            return found  # type: ignore[no-any-return]

        monkeypatch.setattr(store, "user_version", then_kill)
    else:
        terminate_backends(url)
    with caplog.at_level(logging.WARNING):
        if read == "user_version":
            assert store.user_version("ana") == version
        elif read == "sessions":
            assert store.sessions("ana") == [session]
        else:
            found = store.catch_up("ana", after_id=0, known=(-1, -1), embedder="e")
            assert found.version == version and [s.id for s in found.sessions] == [session.id]
            assert [m.content for m in found.memories or []] == ["Lead with counts."]
            assert found.vectors[("s", session.id)].tolist() == [1.0, 0.0]
    assert store.read_retries == 1
    # the lost connection was discarded (the pool's own count of bad returns), not put back
    assert store._shared.pool.get_stats().get("returns_bad", 0) == before + 1
    assert len(taken) == (3 if read.startswith("catch_up") else 2)  # one more checkout: the retry
    retried = [json.loads(r.getMessage()) for r in caplog.records if "read_retried" in r.getMessage()]
    # a pipeline sees the closed socket, not the server's message: no SQLSTATE (see connection_lost)
    lost = ("OperationalError", None) if read == "catch_up_snapshot" else ("AdminShutdown", "57P01")
    assert [(r["event"], r["error"], r["sqlstate"]) for r in retried] == [
        ("memory_store_read_retried", *lost)
    ]
    assert retried[0]["store"] == store.url and "hunter2" not in caplog.text
    assert store.count_sessions("ana") == 1 and store.read_retries == 1  # the pool is healthy again


def test_a_write_on_a_lost_connection_raises_and_is_not_retried(
    unchecked: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write whose connection is lost may have committed (unknowable from here): it is never run
    again. The error names the store (no password) and what is known of the outcome."""
    import psycopg

    from personalign.memory import NewSession

    store, url = unchecked
    before = store.row_counts()
    taken = count_checkouts(store, monkeypatch)
    terminate_backends(url)
    with pytest.raises(psycopg.OperationalError, match="not retried") as info:
        store.add_sessions("ana", [NewSession(CHAT, external_id="once")])  # a pipelined write
    message = str(info.value)
    assert store.url in message and "nothing of it was stored" in message and "hunter2" not in message
    assert len(taken) == 1  # one checkout: no second attempt
    store._shared.pool.wait(10)  # until the pool has opened a connection instead (in its own thread)
    terminate_backends(url)
    with pytest.raises(psycopg.OperationalError, match="not retried"):
        store.add_user("ben")  # a plain (not pipelined) write
    assert len(taken) == 2
    assert store.read_retries == 0
    assert store.row_counts() == before and not store.has_user("ben")  # nothing stored, once or twice
    assert [s.external_id for s in store.sessions("ana")] == [None]


def test_a_query_error_is_not_retried(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Errors of the statement itself leave the connection usable: raised as they are, run once."""
    import psycopg

    store: Any = open_store(postgres_url, pool_size=1)
    taken = count_checkouts(store, monkeypatch)
    with pytest.raises(psycopg.errors.SyntaxError):
        store._read("SELEC 1")
    with pytest.raises(psycopg.errors.DivisionByZero):
        store._read_many([("SELECT 1", ()), ("SELECT 1 / 0", ())])
    store._read("SELECT set_config('statement_timeout', '50', false)")  # this one connection's
    with pytest.raises(psycopg.errors.QueryCanceled):  # an OperationalError, on a live connection
        store._read("SELECT pg_sleep(5)")
    assert len(taken) == 4 and store.read_retries == 0
    assert store._shared.pool.get_stats().get("returns_bad", 0) == 0
    store.close()


def test_a_connection_lost_inside_a_snapshot_fails_the_read_with_the_loss(unchecked: tuple[Any, str]) -> None:
    """Only a read's first round trip is retried: later queries of a snapshot read cannot be run
    again on another connection (rows of the old snapshot are already out). The error is the
    loss itself, not a failed COMMIT on the closed connection."""
    import psycopg

    store, url = unchecked
    with pytest.raises(psycopg.errors.AdminShutdown), store._read_tx() as tx:
        assert tx.rows("SELECT COUNT(*) FROM sessions") == [(1,)]
        terminate_backends(url)
        tx.rows("SELECT COUNT(*) FROM turns")
    assert store.read_retries == 0 and store.count_sessions("ana") == 1


def test_connection_lost_is_the_connections_state_not_the_errors_class() -> None:
    """The retry test: a driver error after which the connection is closed. The class and the
    SQLSTATE would mislead: a statement timeout is an OperationalError on a live connection, a
    pipelined read's loss has no SQLSTATE, an idle-in-transaction kill is an InternalError."""
    psycopg = pytest.importorskip("psycopg")
    from personalign.memory.store_pg import connection_lost

    class Conn:
        Error = psycopg.Error

        def __init__(self, closed: bool) -> None:
            self.closed = closed

    lost = [
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),  # 57P01
        psycopg.errors.CrashShutdown("terminating connection because of crash"),  # 57P02
        psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
        psycopg.errors.IdleInTransactionSessionTimeout("terminating connection"),  # 25P03
    ]
    statement = [
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),  # 57014
        psycopg.errors.SyntaxError("syntax error"),
        psycopg.errors.UniqueViolation("duplicate key"),
        psycopg.errors.DivisionByZero("division by zero"),
    ]
    assert all(connection_lost(Conn(closed=True), e) for e in lost)
    assert not any(connection_lost(Conn(closed=False), e) for e in lost + statement)
    assert not connection_lost(Conn(closed=True), ValueError("not the driver's"))


def test_a_read_whose_retry_fails_too_raises_the_second_error_naming_the_store() -> None:
    """Retried once, not again: the second failure is raised (its class kept), naming the store by
    its redacted URL and the first failure, which is chained."""
    psycopg = pytest.importorskip("psycopg")
    from personalign.memory.store_pg import PostgresStore

    errors = iter(
        [
            psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
            psycopg.OperationalError("consuming input failed: server closed the connection\n\tunexpectedly"),
        ]
    )
    checkouts: list[Conn] = []

    class Cursor:
        def __init__(self, conn: Conn) -> None:
            self.conn = conn

        def __enter__(self) -> Cursor:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def execute(self, sql: str, params: object = ()) -> None:
            self.conn.closed = True
            raise next(errors)

    class Conn:
        Error = psycopg.Error
        closed = False

        def cursor(self) -> Cursor:
            return Cursor(self)

    class Pool:
        @contextmanager
        def connection(self) -> Iterator[Conn]:
            checkouts.append(Conn())
            yield checkouts[-1]

    class Shared:
        read_retries, lock, pool, migrated_from, pgvector = 0, threading.Lock(), Pool(), 1, False

    Shared.psycopg = psycopg  # type: ignore[attr-defined]
    store = PostgresStore("postgresql://me:hunter2@db.example/mem", _shared=Shared())  # type: ignore[arg-type]
    with pytest.raises(psycopg.OperationalError) as info:
        store.has_user("ana")
    message = str(info.value)
    assert type(info.value) is psycopg.OperationalError  # the second error's class
    assert message.startswith("memory store postgresql://me:***@db.example/mem: a read retried once")
    assert "AdminShutdown: terminating connection" in message  # the first, mentioned
    assert "connection unexpectedly" in message and "\n" not in message and "hunter2" not in message
    assert isinstance(info.value.__cause__, psycopg.OperationalError)  # the second, chained
    assert isinstance(info.value.__cause__.__context__, psycopg.errors.AdminShutdown)  # and the first
    assert len(checkouts) == 2 and store.read_retries == 1


# --- catching an index up ------------------------------------------------------------------------


def test_catch_up_reads_only_what_moved_since_the_callers_version(make_store: MakeStore) -> None:
    store = make_store()
    store.add_user("ana")
    s1 = store.add_session("ana", CHAT, timestamp=1.0, vectors={"e": vec(1, 0)})
    s2 = store.add_session("ana", CHAT[:1], timestamp=2.0, vectors={"e": vec(0, 1)})
    m = store.add_memory("ana", "Lead with counts.", context_factor="Okafor")
    store.put_vectors("ana", "m", "e", {m.id: vec(1, 1)})
    store.put_vectors("ana", "s", "other", {s1: vec(5, 5)})  # another embedder's: never read

    first = store.catch_up("ana", after_id=0, known=(-1, -1), embedder="e")
    assert first.version == store.user_version("ana")
    assert (first.count, first.last) == (2, s2)
    assert [s.id for s in first.sessions] == [s1, s2]
    assert first.sessions[0].turns[2].content == CHAT[2]["content"]
    assert [x.id for x in first.memories or []] == [m.id]
    assert sorted(first.vectors) == sorted([("s", s1), ("s", s2), ("m", m.id)])
    assert first.vectors[("s", s2)].tolist() == [0.0, 1.0]

    same = store.catch_up("ana", after_id=s2, known=first.version, embedder="e")
    assert same.version == first.version and (same.count, same.last) == (-1, -1)
    assert (same.sessions, same.memories, same.vectors) == ([], None, {})  # nothing else read

    s3 = store.add_session("ana", CHAT[:1], timestamp=3.0, vectors={"e": vec(2, 2)})
    moved = store.catch_up("ana", after_id=s2, known=first.version, embedder="e")
    assert moved.version != first.version and (moved.count, moved.last) == (3, s3)
    assert [s.id for s in moved.sessions] == [s3]  # only the new session...
    assert sorted(moved.vectors) == sorted([("s", s3), ("m", m.id)])  # ...and every memory
    assert [x.id for x in moved.memories or []] == [m.id]
    assert store.catch_up("ana", after_id=s3, known=moved.version, embedder=None).vectors == {}
    for nobody in ("bob", "x" * 10_000):
        with pytest.raises(UnknownUserError):
            store.catch_up(nobody, after_id=0, known=(-1, -1), embedder="e")


def test_record_sessions_returns_what_a_read_back_would_and_the_versions_around_it(
    make_store: MakeStore,
) -> None:
    from personalign.memory import NewSession

    store = make_store()
    store.add_user("ana")
    store.add_session("ana", CHAT, timestamp=1.0)
    before = store.user_version("ana")
    batch = [
        NewSession(CHAT, timestamp=5.0, metadata={"k": [1, "é"]}, external_id="t1", vectors={"e": vec(1, 2)}),
        NewSession(CHAT[:1], timestamp=3.0, vectors={"e": vec(3, 4), "f": vec(0, 1)}),
    ]
    recorded = store.record_sessions("ana", batch)
    assert recorded.before == before and recorded.version == store.user_version("ana")
    ids = [s.id for s in recorded.sessions]
    read = {s.id: s for s in store.sessions("ana")}
    assert [read[i] for i in ids] == recorded.sessions  # ids, seq, timestamps, metadata, turns
    assert recorded.sessions[0].metadata == {"k": [1, "é"]} and recorded.sessions[1].seq == 2
    assert sorted(recorded.vectors) == ["e", "f"]
    assert {k: v.tolist() for k, v in recorded.vectors["e"].items()} == {
        ids[0]: [1.0, 2.0],
        ids[1]: [3.0, 4.0],
    }
    assert recorded.vectors["e"][ids[1]].tolist() == store.vectors("ana", "s", "e", [ids[1]])[ids[1]].tolist()
    assert list(recorded.vectors["f"]) == [ids[1]]
    (after,) = store.add_sessions("ana", [NewSession(CHAT[:1])])
    assert after > max(ids) and store.user_version("ana") == (before[0], before[1] + 2)


def test_a_refused_batch_leaves_the_connection_fit_for_the_next_write(
    make_store: MakeStore, store_url: str
) -> None:
    from personalign.memory import NewSession

    # one pooled connection on PostgreSQL: the write after each refusal runs on the same connection
    store = make_store(**({"pool_size": 1} if store_url.startswith("postgresql") else {}))
    store.add_user("ana")
    with pytest.raises(DataError, match="given twice in this batch") as info:
        store.add_sessions("ana", [NewSession(CHAT, external_id="t1"), NewSession(CHAT, external_id="t1")])
    assert "'t1'" in str(info.value) and "sessions 0 and 1" in str(info.value)
    store.add_session("ana", CHAT, external_id="t1")
    for _ in range(2):
        with pytest.raises(DataError, match="already stored"):
            store.add_sessions("ana", [NewSession(CHAT, external_id="t1")])
        assert store.add_session("ana", CHAT[:1]) > 0
    assert [s.seq for s in store.sessions("ana")] == [0, 1, 2]
    assert store.user_version("ana")[1] == 3


def test_a_batch_with_a_taken_external_id_names_it_and_stores_nothing(make_store: MakeStore) -> None:
    from personalign.memory import NewSession

    store = make_store()
    store.add_user("ana")
    store.add_session("ana", CHAT, external_id="t1")
    before = store.user_version("ana")
    batch = [NewSession(CHAT, external_id="t2"), NewSession(CHAT, external_id="t1")]
    with pytest.raises(DataError, match="already stored") as info:
        store.add_sessions("ana", batch)
    assert "'t1'" in str(info.value)
    assert store.count_sessions("ana") == 1 and store.user_version("ana") == before
    ids = store.add_sessions("ana", [NewSession(CHAT, external_id="t2"), NewSession(CHAT)])
    assert [s.id for s in store.sessions("ana")][1:] == ids and [s.seq for s in store.sessions("ana")] == [
        0,
        1,
        2,
    ]
    with pytest.raises(UnknownUserError):
        store.add_sessions("bob", batch)


def test_new_sqlite_files_opened_at_once_never_report_locked(tmp_path: Path) -> None:
    """Switching a new file to WAL answers "database is locked" at once (no busy wait) while another
    opener creates it; the store waits that out (6 openers x 100 new files failed ~3% before)."""
    from personalign.memory.store import MemoryStore

    errors: list[BaseException] = []
    for round_ in range(100):
        path = tmp_path / f"m{round_}.sqlite"
        handles, failed = open_at_once(partial(MemoryStore, path), 6)
        errors.extend(failed)
        for handle in handles:
            handle.close()
    assert errors == []

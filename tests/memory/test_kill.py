"""A process killed during ingestion leaves the store consistent and usable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from personalign.memory import MemoryEngine, open_store

WRITER = textwrap.dedent(
    """
    import sys
    from personalign.memory import MemoryEngine
    engine = MemoryEngine(sys.argv[1], embedder="hash")
    engine.add_user("ana")
    i = 0
    while True:
        turns = [{"role": "user" if t % 2 == 0 else "assistant", "content": f"session {i} turn {t} " * 40}
                 for t in range(60)]
        sid = engine.add_session("ana", turns, timestamp=float(i))
        engine.add_memory("ana", f"preference {i}", context_factor=f"factor {i % 7}", session_id=sid)
        print(i, flush=True)
        i += 1
    """
)


def test_kill_during_ingestion_leaves_a_consistent_store(store_url: str) -> None:
    """On both stores (tests/memory/conftest.py): a SQLite file, or a PostgreSQL database whose
    client is killed with transactions open on the server."""
    path = store_url
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    committed = -1
    deadline = time.monotonic() + 60
    while committed < 25 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    time.sleep(0.013)  # land somewhere inside a later write
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert committed >= 25, "the writer did not get going"

    store = open_store(path)
    assert store.check() == []
    n = store.count_sessions("ana")
    assert n >= committed + 1
    sessions = store.sessions("ana")
    assert all(len(s.turns) == 60 for s in sessions)
    vectors = store.vectors("ana", "s", "hash:512", [s.id for s in sessions])
    assert len(vectors) == n  # each session landed with its embedding, or not at all
    # one current memory per factor, the rest kept as history
    current = store.memories("ana")
    assert len({m.context_factor for m in current}) == len(current)
    store.close()

    # the store stays usable: ingest more and find it
    engine = MemoryEngine(path, embedder="hash")
    engine.add_session("ana", [{"role": "user", "content": "Plan the Monterey kayak trip."}])
    assert "kayak" in engine.retrieve("ana", "Monterey kayak", k_sessions=1).sessions[0].text

"""Two processes writing one store at once (SQLite file or PostgreSQL database) lose nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from personalign.memory import UnknownUserError, open_store

N = 60  # writes per process

WRITER = textwrap.dedent(
    """
    import sys
    from personalign.memory import open_store
    url, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(url)
    store.add_user("shared")  # both processes add it: one row, no error
    store.add_user(name)
    print("ready", flush=True)
    sys.stdin.readline()  # start together with the other writer
    for i in range(n):
        turns = [{"role": "user", "content": f"{name} says {i}"}]
        sid = store.add_session("shared", turns, timestamp=float(i))
        store.add_memory("shared", f"{name} preference {i}", context_factor=f"factor {i % 3}", session_id=sid)
        store.add_session(name, [{"role": "user", "content": f"own {i}"}])
        print(sid, flush=True)  # acknowledged: committed
    store.close()
    """
)


def test_two_writer_processes_lose_nothing(store_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, store_url, name, str(N)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("p1", "p2")
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.stderr and p.stderr.read()
    store = open_store(store_url)
    seen: set[int] = set()
    done = threading.Event()

    def follow() -> None:
        """Read new sessions the way an index refresh does (``after_id``) while the writers run."""
        last = 0
        while True:
            finished = done.is_set()
            try:
                new = store.sessions("shared", after_id=last)
            except UnknownUserError:
                new = []
            seen.update(s.id for s in new)
            last = max([last, *(s.id for s in new)])
            if finished:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    outputs = [p.communicate(timeout=300) for p in procs]  # closes stdin too
    done.set()
    reader.join()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    acked = {int(line) for out, _ in outputs for line in out.split()}
    assert len(acked) == 2 * N

    sessions = store.sessions("shared")
    assert {s.id for s in sessions} == acked
    assert seen == acked  # an incremental reader never skips a session committed behind it
    assert sorted(s.seq for s in sessions) == list(range(2 * N))
    assert store.revision("shared") == 4 * N  # every write counted: no lost update
    memories = store.memories("shared", include_superseded=True)
    assert len(memories) == 2 * N
    assert sorted(m.context_factor for m in store.memories("shared")) == ["factor 0", "factor 1", "factor 2"]
    assert store.count_sessions("p1") == store.count_sessions("p2") == N
    assert store.users() == ["p1", "p2", "shared"]
    assert store.check() == []
    store.close()

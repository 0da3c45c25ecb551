"""SIGKILL the gateway under load: every acknowledged turn (a JSON answer, or a stream that reached
[DONE]) is in the store afterwards, and the store is consistent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from personalign.memory.store import MemoryStore
from personalign.serve import KeyRing, new_key
from tests.support.llama_server import free_port
from tests.support.stub_server import StubServer


def test_sigkill_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    key, record = new_key("acme", rate=1e6, burst=100_000)
    keys = tmp_path / "keys.jsonl"
    KeyRing([record]).save(keys)
    store = tmp_path / "gw.sqlite"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with StubServer(latency=0.02) as stub:
        upstream = f"stub=openai-compat/stub@{stub.base_url}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "personalign", "serve", "--upstream", upstream, "--store", str(store),
             "--keys", str(keys), "--port", str(port), "--embedder", "hash"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.1)

        acknowledged: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def client(n: int) -> None:
            with httpx.Client(base_url=base, timeout=10) as http:
                i = 0
                while not stop.is_set():
                    rid = f"c{n}-{i}"
                    i += 1
                    stream = i % 2 == 0
                    body = {"messages": [{"role": "user", "content": f"Note {rid} about Porto."}],
                            "user": f"user{n % 3}", "stream": stream}  # fmt: skip
                    headers = {"Authorization": f"Bearer {key}", "X-Request-Id": rid}
                    try:
                        r = http.post("/v1/chat/completions", json=body, headers=headers)
                    except httpx.HTTPError:
                        return  # the gateway is gone
                    done = r.status_code == 200 and (not stream or r.text.rstrip().endswith("data: [DONE]"))
                    if done:
                        with lock:
                            acknowledged.append(rid)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        while len(acknowledged) < 30 and time.monotonic() < deadline + 60:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=20)
    assert len(acknowledged) >= 30

    memory = MemoryStore(store, tenant="acme")
    assert memory.check() == []
    stored = set()
    for n in range(3):
        if memory.has_user(f"user{n}"):
            stored |= {s.metadata.get("request_id") for s in memory.sessions(f"user{n}")}
    missing = sorted(set(acknowledged) - stored)
    assert not missing, json.dumps(missing)
    memory.close()

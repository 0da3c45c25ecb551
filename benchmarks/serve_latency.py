"""Latency the gateway adds over calling the upstream directly, with retrieval on a large store.

    .venv/bin/python benchmarks/serve_latency.py [--sessions 100000] [--per-user 100] [--latency 0.1]
        [--postgres auto|URL [--queries PATH.json]] [--replicas 1,2] [--store PATH.sqlite]
        [--route turn|user] [--concurrency 1,32] [--requests 2000] [--active-users 200]
        [--embedder minilm|static|hash|none]

1. Fills a memory store (SQLite; with ``--postgres``, PostgreSQL) with ``--sessions`` sessions
   (5 turns each) of users holding ``--per-user`` sessions, stored directly with random unit
   vectors under the embedder's name (the dense search cost does not depend on the values;
   encoding 10^5 sessions would take minutes).
2. Starts the loopback stub upstream (fixed ``--latency``, streaming SSE) and the gateway
   (``personalign.serve``, httptools + uvloop; ``--replicas`` processes sharing the store, clients
   sent to them in turn, or with ``--route user`` each user to one of them) in their own processes,
   so the load generator's CPU is not counted.
3. Drives ``--concurrency`` streaming clients: first straight at the stub, then through the gateway
   (each request: retrieve from the user's history, inject, forward, stream, record the exchange).
   Each active user is touched once on every replica it is routed to before the timed run (their
   index is built then; these first touches are reported apart as the cold latency).
Prints p50/p99 of the full streamed answer time for both, the difference (added latency), the same
through the gateway with memory off (``"personalign": {"memory": false}``: the proxy alone), time to
first content byte, requests per second, the load average, and the gateway's CPU per request, for
every combination of ``--replicas`` and ``--concurrency`` (lists) on the one filled store.
Target: p50 added < 10 ms at 10^5 sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_speed import FEEDBACK, FIRST, LAST, TASKS  # noqa: E402

from personalign.memory.backend import NewSession  # noqa: E402
from personalign.memory.stores import open_store  # noqa: E402
from personalign.serve.keys import KeyRing, new_key  # noqa: E402

TENANT = "bench"
CONTENT = re.compile(rb'"content": ?"[^"]')  # a non-empty content delta


VOCAB = [f"w{i}" for i in range(20000)]


def make_session(rng: random.Random) -> tuple[list[dict[str, str]], str]:
    """A 5-turn session (as memory_speed.make_session) and a query about it; ``random.choices``
    draws the filler words in one call, which keeps generating 10^5 sessions to seconds."""

    def words(n: int) -> str:
        return " ".join(rng.choices(VOCAB, k=n))

    name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
    task = rng.choice(TASKS)
    turns = [
        {"role": "user", "content": f"Can you draft the {task} for {name}? It covers {words(12)}."},
        {"role": "assistant", "content": f"Here is a draft {task}: {words(40)}."},
        {"role": "user", "content": rng.choice(FEEDBACK) + " " + words(6)},
        {"role": "assistant", "content": f"Revised: {words(30)}."},
        {"role": "user", "content": "Thanks, that works."},
    ]
    return turns, f"{name} wants the {task} about {words(4)}"


def fill_store(target: str, sessions: int, per_user: int, embedder: str | None) -> dict[str, list[str]]:
    """The store, filled (one multi-row transaction per user); returns a few queries per user."""
    from personalign.retrieval import load_embedder

    name, dim = None, 0
    if embedder is not None:
        model = load_embedder(embedder)
        name, dim = model.name, model.dim
    rng = random.Random(0)
    vec_rng = np.random.default_rng(0)
    store = open_store(target, tenant=TENANT)
    users = max(1, sessions // per_user)
    queries: dict[str, list[str]] = {}

    def batch_of(u: int) -> tuple[str, list[NewSession]]:
        user = f"user{u}"
        batch = []
        for i in range(per_user):
            turns, query = make_session(rng)
            vectors = None
            if name is not None:
                vector = vec_rng.standard_normal(dim).astype(np.float32)
                vectors = {name: vector / np.linalg.norm(vector)}
            batch.append(NewSession(turns, timestamp=float(u * per_user + i), vectors=vectors))
            if len(queries.setdefault(user, [])) < 3:
                queries[user].append(query)
        return user, batch

    def write(user: str, batch: list[NewSession]) -> None:
        store.add_user(user)
        store.add_sessions(user, batch)

    # a server store takes several users' transactions at once (its own process does the work)
    threads = 1 if target.endswith(".sqlite") or "://" not in target else 4
    with ThreadPoolExecutor(threads) as pool:
        pending: list[Future[None]] = []
        for u in range(users):
            pending.append(pool.submit(write, *batch_of(u)))
            if len(pending) >= 2 * threads:  # a few users in flight, not the whole store in memory
                pending.pop(0).result()
        for done in pending:
            done.result()
    store.close()
    return queries


@contextmanager
def stub_process(latency: float) -> Iterator[str]:
    """The loopback stub (streaming SSE, fixed latency) in its own process; yields its base URL."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.stub_server", "--latency", str(latency), "--fast"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield child.stdout.readline().strip()
    finally:
        child.terminate()
        child.wait(timeout=30)


@contextmanager
def process(args: list[str], ready: str) -> Iterator[subprocess.Popen[str]]:
    """A child process; waits until GET ``ready`` answers 200, stops it by PID afterwards."""
    child = subprocess.Popen([sys.executable, *args], cwd=ROOT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            if child.poll() is not None:
                raise RuntimeError(f"{args[:2]} exited with {child.returncode}")
            try:
                if httpx.get(ready, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[:2]} did not become ready")
            time.sleep(0.1)
        yield child
    finally:
        child.terminate()
        child.wait(timeout=30)


@contextlib.contextmanager
def postgres(option: str | None) -> Iterator[str | None]:
    """None (SQLite), the given database URL, or ('auto') a fresh database on a throwaway server
    started from the system's binaries (tests/support/postgres.py)."""
    if option is None or option != "auto":
        yield option
        return
    sys.path.insert(0, str(ROOT))
    from tests.support.postgres import postgres_server

    with postgres_server() as server:
        yield server.create_database("gateway_bench")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc), all its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_gateway(ns: argparse.Namespace) -> None:
    """The gateway process (``--role gateway``)."""
    import uvicorn

    from personalign.serve import GatewayConfig, create_app

    config = GatewayConfig(
        upstreams=[f"stub=openai-compat/stub@{ns.upstream}?concurrency=256"],
        keys=KeyRing.load(Path(ns.keys)),
        store=ns.store,
        embedder=None if ns.embedder == "none" else ns.embedder,
        k_sessions=3,
    )
    app = create_app(config)
    uvicorn.run(app, host="127.0.0.1", port=ns.port, http="httptools", loop="uvloop",
                access_log=False, log_config=None, lifespan="on", backlog=4096)  # fmt: skip


def replica_of(user: str, replicas: int) -> int:
    """The replica a user-affine balancer sends ``user`` to (a stable hash of the user id, as a proxy
    hashing the ``X-Personalign-User`` header would)."""
    return int.from_bytes(hashlib.blake2b(user.encode(), digest_size=8).digest(), "big") % replicas


async def drive(
    urls: list[str],
    headers: dict[str, str],
    jobs: list[tuple[str, str]],
    concurrency: int,
    route: str = "turn",
    memory: bool = True,
) -> tuple[list[float], list[float], float, int]:
    """Run the jobs (user, text) with `concurrency` streaming clients; (totals, first bytes, wall, errors).

    ``route``: ``turn`` sends the jobs to the replicas in turn; ``user`` sends each user to one replica."""
    totals: list[float] = []
    firsts: list[float] = []
    errors = 0
    queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()  # (url, user, text)
    for n, (user, text) in enumerate(jobs):
        at = n % len(urls) if route == "turn" else replica_of(user, len(urls))
        queue.put_nowait((urls[at], user, text))
    # a kept-alive connection per client and replica: with one pool-wide slot per client, a client
    # alternating between two replicas would open a new connection for every request
    slots = concurrency * len(urls)
    limits = httpx.Limits(max_connections=slots, max_keepalive_connections=slots)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            nonlocal errors
            while not queue.empty():
                url, user, text = queue.get_nowait()
                body = {"model": "stub", "user": user, "stream": True,
                        "messages": [{"role": "user", "content": text}]}  # fmt: skip
                if not memory:
                    body["personalign"] = {"memory": False}
                started = time.perf_counter()
                first = None
                try:
                    async with client.stream("POST", url, json=body, headers=headers) as response:
                        if response.status_code != 200:
                            errors += 1
                            await response.aread()
                            continue
                        tail = b""
                        async for chunk in response.aiter_bytes():
                            if first is None and CONTENT.search(chunk):
                                first = time.perf_counter() - started
                            tail = (tail + chunk)[-32:]
                        if b"[DONE]" not in tail:
                            errors += 1
                            continue
                except httpx.HTTPError:
                    errors += 1
                    continue
                totals.append(time.perf_counter() - started)
                firsts.append(first if first is not None else totals[-1])

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return totals, firsts, wall, errors


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) * 1000 if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", default="32", help="clients; a list (1,16) measures each")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--active-users", type=int, default=200)
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--store", help="reuse a filled SQLite store (skips filling)")
    parser.add_argument("--postgres", help="'auto' (a throwaway server) or an empty database's URL")
    parser.add_argument(
        "--queries", help="with --postgres URL: the database is already filled, these are its queries (JSON)"
    )
    parser.add_argument(
        "--replicas", default="1", help="gateway processes sharing the store; a list (1,2) measures each"
    )
    parser.add_argument(
        "--route",
        default="turn",
        choices=["turn", "user"],
        help="with several replicas: requests to each in turn (every user's index catches up with the "
        "other replica's writes on the request path), or each user to one replica (a balancer hashing "
        "the user header; docs/serve.md)",
    )
    # internal: the gateway process
    parser.add_argument("--role", default="bench", choices=["bench", "gateway"])
    parser.add_argument("--upstream")
    parser.add_argument("--keys")
    parser.add_argument("--port", type=int, default=0)
    ns = parser.parse_args()
    if ns.role == "gateway":
        run_gateway(ns)
        return

    embedder = None if ns.embedder == "none" else ns.embedder
    with tempfile.TemporaryDirectory() as tmp, postgres(ns.postgres) as pg_url:
        started = time.perf_counter()
        if pg_url is not None:
            store = pg_url
            if ns.queries:  # filled by an earlier run (its queries file kept)
                queries = json.loads(Path(ns.queries).read_text())
            else:
                queries = fill_store(store, ns.sessions, ns.per_user, embedder)
        else:
            path = Path(ns.store or Path(tmp) / "gateway.sqlite")
            store = str(path)
            queries_path = path.with_suffix(".queries.json")
            if ns.store and queries_path.exists():
                queries = json.loads(queries_path.read_text())
            else:
                queries = fill_store(store, ns.sessions, ns.per_user, embedder)
                queries_path.write_text(json.dumps(queries))
        fill_s = time.perf_counter() - started
        where = "PostgreSQL" if pg_url else "SQLite"
        print(
            f"store ({where}): {ns.sessions} sessions in {len(queries)} users ({fill_s:.1f} s to fill)",
            end="",
        )
        print(f", embedder {ns.embedder}")
        key, record = new_key(TENANT, rate=1e6, burst=1_000_000)
        keys = Path(tmp) / "keys.jsonl"
        KeyRing([record]).save(keys)
        for replicas in [int(r) for r in str(ns.replicas).split(",")]:
            for concurrency in [int(c) for c in str(ns.concurrency).split(",")]:
                measure(ns, store, queries, keys, key, replicas, concurrency)


def measure(
    ns: argparse.Namespace,
    store: str,
    queries: dict[str, list[str]],
    keys: Path,
    key: str,
    replicas: int,
    concurrency: int,
) -> None:
    """One measurement: ``replicas`` fresh gateways on the store, ``concurrency`` clients; prints it."""
    headers = {"Authorization": f"Bearer {key}"}
    ports = [free_port() for _ in range(replicas)]
    rng = random.Random(1)
    active = rng.sample(sorted(queries), min(ns.active_users, len(queries)))
    jobs = [(u, rng.choice(queries[u])) for u in (rng.choice(active) for _ in range(ns.requests))]
    with stub_process(ns.latency) as upstream, contextlib.ExitStack() as stack:
        gateways = []
        for port in ports:
            gw_args = [str(Path(__file__).resolve()), "--role", "gateway", "--upstream", upstream]
            gw_args += ["--keys", str(keys), "--store", store, "--port", str(port)]
            gw_args += ["--embedder", ns.embedder]
            gateways.append(stack.enter_context(process(gw_args, f"http://127.0.0.1:{port}/healthz")))
        direct_url = [f"{upstream}/chat/completions"]
        gw_urls = [f"http://127.0.0.1:{port}/v1/chat/completions" for port in ports]
        # cold: the first touch of each active user (index build) on every replica it is sent to
        # (in turn: each user's consecutive copies land on each replica once)
        copies = len(gw_urls) if ns.route == "turn" else 1
        warmup = [(u, queries[u][0]) for u in active for _ in range(copies)]
        cold, _, _, cold_err = asyncio.run(drive(gw_urls, headers, warmup, concurrency, ns.route))
        d_tot, d_first, d_wall, d_err = asyncio.run(drive(direct_url, {}, jobs, concurrency))
        before = scrape(ports)
        cpu_before = sum(cpu_seconds(g.pid) for g in gateways)
        load_before = os.getloadavg()[0]
        g_tot, g_first, g_wall, g_err = asyncio.run(drive(gw_urls, headers, jobs, concurrency, ns.route))
        load = (load_before + os.getloadavg()[0]) / 2
        time.sleep(1.0)  # let the last index upkeep finish: it is part of each request's cost
        gw_cpu = sum(cpu_seconds(g.pid) for g in gateways) - cpu_before
        metrics = scrape(ports)
        # the same requests with memory off (no retrieval, no recording): the proxy's own cost
        o_tot, o_first, o_wall, o_err = asyncio.run(
            drive(gw_urls, headers, jobs, concurrency, ns.route, memory=False)
        )
    routed = "" if replicas == 1 else f", routed by {'user' if ns.route == 'user' else 'turn (in turn)'}"
    print(f"\n## {replicas} gateway replica(s){routed}, {concurrency} concurrent streaming clients")
    print(
        f"stub latency {ns.latency * 1000:.0f} ms, {ns.requests} requests over {len(active)} active ", end=""
    )
    print(f"users, load average {load:.1f} (1-minute, mean of start and end of the timed run)")
    print("| path | p50 ms | p99 ms | first content p50 ms | requests/s | errors |")
    print("|---|---|---|---|---|---|")
    for label, totals, firsts, wall, errors in (
        ("direct to stub", d_tot, d_first, d_wall, d_err),
        ("through gateway", g_tot, g_first, g_wall, g_err),
        ("through gateway, memory off", o_tot, o_first, o_wall, o_err),
    ):
        print(f"| {label} | {pct(totals, 50):.1f} | {pct(totals, 99):.1f} | {pct(firsts, 50):.1f} ", end="")
        print(f"| {len(totals) / wall:.0f} | {errors} |")
    print(f"added latency: p50 {pct(g_tot, 50) - pct(d_tot, 50):.1f} ms, ", end="")
    print(f"p99 {pct(g_tot, 99) - pct(d_tot, 99):.1f} ms ", end="")
    off50, off99 = pct(o_tot, 50) - pct(d_tot, 50), pct(o_tot, 99) - pct(d_tot, 99)
    print(f"(memory off: p50 {off50:.1f} ms, p99 {off99:.1f} ms)")
    print(f"cold first touch per user (index build): p50 {pct(cold, 50):.1f} ms, ", end="")
    print(f"p99 {pct(cold, 99):.1f} ms ({cold_err} errors)")
    per_request = 1000 * gw_cpu / max(1, len(g_tot))
    print(f"gateway process CPU per request (timed run, upkeep included): {per_request:.1f} ms")
    print(f"turns recorded by the gateway: {metric(metrics, 'personalign_turns_recorded_total'):.0f}")
    print("mean time per request inside the gateway (timed run):")
    for name, what in (
        ("personalign_memory_seconds", "encode + retrieve + select"),
        ("personalign_upstream_seconds", "upstream call (whole stream)"),
        ("personalign_record_seconds", "store the exchange"),
        ("personalign_index_upkeep_seconds", "index upkeep after the answer (off the request path)"),
        ("personalign_http_request_seconds", "whole request"),
    ):
        count = metric(metrics, f"{name}_count") - metric(before, f"{name}_count")
        total = metric(metrics, f"{name}_sum") - metric(before, f"{name}_sum")
        if count:
            print(f"  {what}: {1000 * total / count:.1f} ms")


def scrape(ports: list[int]) -> str:
    """Every replica's /metrics, concatenated."""
    return "\n".join(httpx.get(f"http://127.0.0.1:{port}/metrics").text for port in ports)


def metric(metrics: str, sample: str) -> float:
    """The sum of ``sample`` over one or more Prometheus text expositions (the replicas'): unlabelled,
    or labelled for the chat route (0 when absent)."""
    return sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith(sample)
        and line[len(sample) : len(sample) + 1] in (" ", "{")
        and ("chat" in line or "{" not in line)
    )


if __name__ == "__main__":
    main()

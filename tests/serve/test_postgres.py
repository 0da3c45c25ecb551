"""The gateway on a real PostgreSQL store: the same behaviour as on SQLite, and two replicas that
share one store (a turn recorded through one is retrieved through the other)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.serve.conftest import Gateway, make_keys


def api(gw: Gateway, method: str, path: str, user: str = "ana", key: str = "a", **kwargs: Any) -> Any:
    if method in ("get", "delete"):
        kwargs.setdefault("params", {})["user"] = user
    else:
        kwargs.setdefault("json", {})["user"] = user
    return gw.client.request(method, path, headers=gw.headers(key), **kwargs)


def test_two_replicas_share_one_postgres_store(
    gateway_factory: Callable[..., Gateway], postgres_url: str
) -> None:
    keys = make_keys()
    one = gateway_factory(store=postgres_url, keys=keys)
    two = gateway_factory(store=postgres_url, keys=keys, stub=one.stub)
    assert one.chat("For the Okafor transect report I prefer raw counts per transect.").status_code == 200
    r = two.chat("Draft the Okafor transect report for August.")
    assert r.status_code == 200 and r.headers["x-personalign-sessions"] == "1"
    assert one.stub is not None
    system = [m["content"] for m in one.stub.stats.last_body["messages"] if m["role"] == "system"]
    assert system and "raw counts per transect" in system[0]
    # streamed through replica two, visible through replica one
    r = two.chat("I prefer tables for the Brookfield budget.", stream=True, user="bo")
    assert r.text.rstrip().endswith("data: [DONE]")
    assert len(api(one, "get", "/v1/memory/export", user="bo").json()["sessions"]) == 1
    # isolation holds on PostgreSQL: tenant globex sees no user 'ana'
    assert api(one, "get", "/v1/memory/export", key="b").status_code == 404


def test_memory_api_on_postgres(gateway_factory: Callable[..., Gateway], postgres_url: str) -> None:
    gw = gateway_factory(store=postgres_url)
    gw.chat("I prefer long walks in Sintra.")
    gw.chat("I prefer long walks in Sintra.", key="b")
    first = api(gw, "post", "/v1/memory/memories", json={"content": "Lives in Porto.", "kind": "fact"}).json()
    fixed = api(
        gw, "post", f"/v1/memory/memories/{first['id']}/correct", json={"content": "Lives in Lisbon."}
    )
    assert fixed.status_code == 201
    every = api(gw, "get", "/v1/memory/memories", params={"include_superseded": "true"}).json()["data"]
    old = next(m for m in every if m["id"] == first["id"])
    assert old["superseded_by"] == fixed.json()["id"] and not old["current"]
    assert api(gw, "delete", f"/v1/memory/memories/{fixed.json()['id']}").status_code == 200
    left = api(gw, "get", "/v1/memory/memories", params={"include_superseded": "true"}).json()["data"]
    assert [m["id"] for m in left] == [first["id"]] and left[0]["superseded_by"] is None
    body = api(gw, "delete", "/v1/memory/users").json()
    assert body["deleted"]["users"] == 1 and body["deleted"]["sessions"] == 1 and body["user_exists"] is False
    assert api(gw, "get", "/v1/memory/export").status_code == 404
    assert len(api(gw, "get", "/v1/memory/export", key="b").json()["sessions"]) == 1

"""The memory REST API: list, search, add, correct, delete, delete a user, export; OpenAPI."""

from __future__ import annotations

import sqlite3
from typing import Any

from personalign.memory.sqlbase import TABLES
from tests.serve.conftest import Gateway


def api(gw: Gateway, method: str, path: str, user: str = "ana", key: str = "a", **kwargs: Any) -> Any:
    if method in ("get", "delete"):
        kwargs.setdefault("params", {})["user"] = user
    else:
        kwargs.setdefault("json", {})["user"] = user
    return gw.client.request(method, path, headers=gw.headers(key), **kwargs)


def test_add_correct_history_and_list(gateway: Gateway) -> None:
    r = api(gateway, "post", "/v1/memory/memories",
            json={"content": "Lead with the raw counts.", "context_factor": "Professor Ines Okafor",
                  "category": "format"})  # fmt: skip
    assert r.status_code == 201
    first = r.json()
    assert first["current"] and first["source"] == "manual" and "user_id" not in first
    r = api(
        gateway, "post", f"/v1/memory/memories/{first['id']}/correct", json={"content": "Lead with a chart."}
    )
    assert r.status_code == 201
    second = r.json()
    assert second["context_factor"] == "Professor Ines Okafor" and second["category"] == "format"
    current = api(gateway, "get", "/v1/memory/memories").json()["data"]
    assert [m["content"] for m in current] == ["Lead with a chart."]
    every = api(gateway, "get", "/v1/memory/memories", params={"include_superseded": "true"}).json()["data"]
    old = next(m for m in every if m["id"] == first["id"])
    assert old["superseded_by"] == second["id"] and old["valid_to"] is not None and not old["current"]
    chain = api(gateway, "get", f"/v1/memory/memories/{second['id']}/history").json()["data"]
    assert [m["content"] for m in chain] == ["Lead with the raw counts.", "Lead with a chart."]
    # a correction of a fact retires the fact (facts never supersede each other on their own)
    fact = api(
        gateway, "post", "/v1/memory/memories", json={"content": "Lives in Porto.", "kind": "fact"}
    ).json()
    fixed = api(
        gateway, "post", f"/v1/memory/memories/{fact['id']}/correct", json={"content": "Lives in Lisbon."}
    )
    facts = [
        m["content"] for m in api(gateway, "get", "/v1/memory/memories").json()["data"] if m["kind"] == "fact"
    ]
    assert facts == ["Lives in Lisbon."] and fixed.json()["kind"] == "fact"
    export = api(gateway, "get", "/v1/memory/export").json()
    events = [(e["memory_id"], e["event"]) for e in export["history"]]
    assert (first["id"], "superseded") in events and (fact["id"], "superseded") in events


def test_search_shows_memories_with_history_and_sessions(gateway: Gateway) -> None:
    gateway.chat("Please help me write to Professor Okafor about the transect counts.")
    m = api(gateway, "post", "/v1/memory/memories",
            json={"content": "Use numbered lists.", "context_factor": "Professor Okafor"}).json()  # fmt: skip
    api(gateway, "post", f"/v1/memory/memories/{m['id']}/correct", json={"content": "Use short paragraphs."})
    found = api(gateway, "post", "/v1/memory/search", json={"query": "Write to Professor Okafor"}).json()
    assert [x["content"] for x in found["memories"]] == ["Use short paragraphs."]
    assert [h["content"] for h in found["memories"][0]["history"]] == ["Use numbered lists."]
    assert found["sessions"] and "transect" in found["sessions"][0]["turns"][0]["content"]
    assert found["matched_factor"] is True


def test_delete_one_memory(gateway: Gateway) -> None:
    keep = api(
        gateway, "post", "/v1/memory/memories", json={"content": "I like tea.", "category": "drink"}
    ).json()
    gone = api(
        gateway,
        "post",
        "/v1/memory/memories",
        json={"content": "Call me Captain Zed.", "category": "nickname"},
    )
    gone_id = gone.json()["id"]
    gateway.chat("What should Captain Zed drink with tea?")
    assert gateway.stub is not None and "Call me Captain Zed." in str(gateway.stub.stats.last_body)
    r = api(gateway, "delete", f"/v1/memory/memories/{gone_id}")
    assert r.status_code == 200 and r.json() == {"deleted": gone_id}
    left = api(gateway, "get", "/v1/memory/memories", params={"include_superseded": "true"}).json()["data"]
    assert [m["id"] for m in left] == [keep["id"]]
    assert all(e["memory_id"] != gone_id for e in api(gateway, "get", "/v1/memory/export").json()["history"])
    # retrieval forgets it at once (the index is refreshed)
    gateway.chat("What should Captain Zed drink with tea?")
    assert gateway.stub is not None
    sent = str(gateway.stub.stats.last_body)
    assert "Call me Captain Zed." not in sent and "I like tea." in sent
    assert api(gateway, "delete", f"/v1/memory/memories/{gone_id}").status_code == 400


def test_delete_user_removes_every_row(gateway: Gateway, tmp_path: Any) -> None:
    gateway.chat("I prefer long walks in Sintra.")
    gateway.chat("I prefer long walks in Sintra.", user="bystander")
    gateway.chat("I prefer long walks in Sintra.", key="b")  # tenant globex, same user id "ana"
    api(gateway, "post", "/v1/memory/memories", json={"content": "Walks in Sintra."})
    api(gateway, "post", "/v1/memory/search", json={"query": "Sintra walks"})  # builds the index
    db = sqlite3.connect(tmp_path / "gw0.sqlite")
    before = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    r = api(gateway, "delete", "/v1/memory/users")
    assert r.status_code == 200
    body = r.json()
    assert (
        body["deleted"]["sessions"] == 1
        and body["deleted"]["memories"] == 1
        and body["deleted"]["users"] == 1
    )
    assert body["user_exists"] is False
    # checked again from outside the gateway: exactly the user's rows are gone, no orphan is left
    after = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    assert {t: before[t] - after[t] for t in TABLES} == {t: body["deleted"].get(t, 0) for t in TABLES}
    users = db.execute("SELECT tenant, user_id FROM users ORDER BY tenant, user_id").fetchall()
    assert users == [("acme", "bystander"), ("globex", "ana")]
    for table in TABLES:
        if table != "users":
            orphans = f"SELECT COUNT(*) FROM {table} WHERE uid NOT IN (SELECT id FROM users)"
            assert db.execute(orphans).fetchone()[0] == 0, table
    db.close()
    assert api(gateway, "get", "/v1/memory/export").status_code == 404
    assert len(api(gateway, "get", "/v1/memory/export", key="b").json()["sessions"]) == 1
    # the user can start over; nothing of the old data comes back
    gateway.chat("Anything about Sintra?")
    assert gateway.stub is not None and "long walks" not in str(gateway.stub.stats.last_body)
    assert len(api(gateway, "get", "/v1/memory/export").json()["sessions"]) == 1


def test_export_holds_everything(gateway: Gateway) -> None:
    gateway.chat("I prefer tables over prose for budgets.")
    api(gateway, "post", "/v1/memory/memories", json={"content": "Budgets as tables.", "category": "format"})
    data = api(gateway, "get", "/v1/memory/export").json()
    assert data["tenant"] == "acme" and data["user"] == "ana"
    first_turn = {"index": 0, "role": "user", "content": "I prefer tables over prose for budgets."}
    assert data["sessions"][0]["turns"][0] == first_turn
    assert data["sessions"][0]["metadata"]["model"] == "stub"
    assert [m["content"] for m in data["memories"]] == ["Budgets as tables."]
    assert [e["event"] for e in data["history"]] == ["add"]


def test_memory_api_needs_a_user_and_validates(gateway: Gateway) -> None:
    r = gateway.client.get("/v1/memory/memories", headers=gateway.headers())
    assert r.status_code == 400 and "user" in r.json()["error"]["message"]
    r = api(gateway, "post", "/v1/memory/memories", json={"content": "x", "kind": "rumour"})
    assert r.status_code == 400 and "kind" in r.json()["error"]["message"]
    r = api(gateway, "post", "/v1/memory/memories", json={"content": "   "})
    assert r.status_code == 400 and "content" in r.json()["error"]["message"]
    assert api(gateway, "get", "/v1/memory/memories", user="nobody").status_code == 404


def test_openapi_schema_is_served(gateway: Gateway) -> None:
    schema = gateway.client.get("/openapi.json").json()
    paths = set(schema["paths"])
    assert {"/v1/chat/completions", "/v1/models", "/v1/memory/memories", "/v1/memory/search",
            "/v1/memory/memories/{memory_id}/correct", "/v1/memory/memories/{memory_id}",
            "/v1/memory/memories/{memory_id}/history", "/v1/memory/users", "/v1/memory/export",
            "/healthz", "/metrics"} <= paths  # fmt: skip
    assert "ChatRequest" in schema["components"]["schemas"]

"""Tenants and users are isolated, whatever the ids look like; keys are stored hashed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from personalign.errors import DataError
from personalign.serve import KeyRing, new_key
from personalign.serve.tenancy import scoped_id, split_scoped
from tests.serve.conftest import Gateway

HOSTILE = [
    "bob",
    "5:acme:bob",
    "acme:bob",
    "../../etc/passwd",
    "'; DROP TABLE users; --",
    'bob" OR 1=1 --',
    "%2e%2e%2f",
    "名前 with spaces\tand tabs",
    "x" * 128,
]


def test_scoped_ids_are_injective() -> None:
    pairs = [("acme", "b:c"), ("acme:b", "c"), ("a", "cme:b:c"), ("5:acme", "bob"), ("acme", "5:acme:bob")]
    ids = {scoped_id(t, u) for t, u in pairs}
    assert len(ids) == len(pairs)
    for t, u in pairs:
        assert split_scoped(scoped_id(t, u)) == (t, u)


def export(gw: Gateway, key: str, user: str) -> Any:
    return gw.client.get("/v1/memory/export", params={"user": user}, headers=gw.headers(key))


@pytest.mark.parametrize("user", HOSTILE)
def test_a_tenant_never_sees_another_tenants_user(gateway: Gateway, user: str) -> None:
    r = gateway.chat(f"I prefer secret plans about Zanzibar for {user}.", key="a", user=user)
    assert r.status_code == 200, r.text
    r = gateway.client.post(
        "/v1/memory/memories",
        json={"user": user, "content": "Acme secret preference."},
        headers=gateway.headers("a"),
    )
    assert r.status_code == 201
    # tenant B, same user id: nothing to read, search, delete or correct
    assert export(gateway, "b", user).status_code == 404
    for method, path, kwargs in (
        ("get", "/v1/memory/memories", {"params": {"user": user}}),
        ("post", "/v1/memory/search", {"json": {"user": user, "query": "Zanzibar secret plans"}}),
        ("delete", "/v1/memory/users", {"params": {"user": user}}),
        ("get", f"/v1/memory/memories/{r.json()['id']}/history", {"params": {"user": user}}),
    ):
        resp = gateway.client.request(method, path, headers=gateway.headers("b"), **kwargs)
        assert resp.status_code == 404, (path, resp.text)
    # tenant B chatting as that user gets no memory from tenant A
    gateway.chat("Tell me about Zanzibar secret plans.", key="b", user=user)
    assert gateway.stub is not None
    sent = json.dumps(gateway.stub.stats.last_body)
    assert "Zanzibar for" not in sent.replace("Tell me about Zanzibar", "") and "Acme secret" not in sent
    # a second key of tenant A sees the same user
    assert export(gateway, "a2", user).json()["user"] == user
    assert len(export(gateway, "a", user).json()["sessions"]) == 1


def test_memory_ids_of_another_user_are_not_reachable(gateway: Gateway) -> None:
    h = gateway.headers("a")
    mine = gateway.client.post(
        "/v1/memory/memories", json={"user": "u1", "content": "Mine."}, headers=h
    ).json()
    gateway.client.post("/v1/memory/memories", json={"user": "u2", "content": "Theirs."}, headers=h)
    for method, path in (
        ("delete", f"/v1/memory/memories/{mine['id']}"),
        ("get", f"/v1/memory/memories/{mine['id']}/history"),
    ):
        r = gateway.client.request(method, path, params={"user": "u2"}, headers=h)
        assert r.status_code == 400 and "memory_id" in r.json()["error"]["message"]
    r = gateway.client.post(
        f"/v1/memory/memories/{mine['id']}/correct", json={"user": "u2", "content": "x"}, headers=h
    )
    assert r.status_code == 400
    assert [
        m["content"]
        for m in gateway.client.get("/v1/memory/memories", params={"user": "u1"}, headers=h).json()["data"]
    ] == ["Mine."]


@pytest.mark.parametrize("user", ["", "x" * 129, "\ud800"])
def test_invalid_user_ids_are_refused(gateway: Gateway, user: str) -> None:
    r = gateway.client.post(
        "/v1/chat/completions",
        content=json.dumps({"messages": [{"role": "user", "content": "hi"}], "user": user}).encode(),
        headers={**gateway.headers(), "Content-Type": "application/json"},
    )
    if user == "":  # an empty user is no user: passed through without memory
        assert r.status_code == 200 and r.headers["x-personalign-memory"] == "off"
    else:
        assert r.status_code == 400 and "user" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "auth",
    [None, "Bearer x", "Bearer nonsense", "Basic abc", "Bearer pk_000000000000_" + "A" * 43],
)
def test_bad_keys_are_refused(gateway: Gateway, auth: str | None) -> None:
    headers = {"Authorization": auth} if auth is not None else {}
    for method, path in (
        ("get", "/v1/models"),
        ("get", "/v1/memory/export"),
        ("post", "/v1/chat/completions"),
    ):
        r = gateway.client.request(
            method, path, headers=headers, json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert r.status_code == 401, path
        assert r.json()["error"]["type"] == "authentication_error"


def test_wrong_secret_for_a_real_key_id_is_refused(gateway: Gateway) -> None:
    real = gateway.keys["a"]
    forged = real[: real.rindex("_") + 1] + "B" * 43
    r = gateway.client.get("/v1/models", headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 401


def test_keys_file_holds_no_secret_and_round_trips(tmp_path: Path) -> None:
    key, record = new_key("acme", rate=3, burst=4)
    ring = KeyRing([record])
    path = tmp_path / "keys.jsonl"
    ring.save(path)
    text = path.read_text()
    secret = key.rsplit("_", 1)[1]
    assert secret not in text and key not in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = KeyRing.load(path)
    found = loaded.authenticate(key)
    assert found is not None and found.tenant == "acme" and found.rate == 3 and found.burst == 4
    revoked = KeyRing([type(record)(**{**record.__dict__, "revoked": True})])
    assert revoked.authenticate(key) is None


def test_bad_keys_file_names_row_and_field(tmp_path: Path) -> None:
    _, record = new_key("acme")
    path = tmp_path / "keys.jsonl"
    KeyRing([record]).save(path)
    path.write_text(path.read_text() + '{"key_id": "k", "tenant": "acme", "salt": "00"}\n')
    with pytest.raises(DataError, match=r"keys.jsonl, row 1, field 'sha256'"):
        KeyRing.load(path)
    path.write_text('{"key_id": "k", "tenant": "../x", "salt": "00", "sha256": "ab"}\n')
    with pytest.raises(DataError, match=r"row 0, field 'record'.*tenant"):
        KeyRing.load(path)

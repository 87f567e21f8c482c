"""The values surfaces use: a principal's scopes, a request's JSON and its checks."""

from __future__ import annotations

import pytest

from satsuma.serve import HTTPError, Principal, Request, agent_id_from


def request(body: bytes = b"", principal: Principal | None = None) -> Request:
    return Request(
        method="POST",
        path="/x",
        query={},
        headers={},
        body=body,
        principal=principal or Principal("ops", frozenset({"read"})),
    )


def test_scopes_and_agents() -> None:
    reader = Principal("r", frozenset({"read"}), frozenset({"support"}))
    assert reader.allows("read") and reader.allows("read", "support")
    assert not reader.allows("read", "billing") and not reader.allows("run")
    admin = Principal("a", frozenset({"admin"}))
    assert all(admin.allows(scope, "any") for scope in ("run", "read", "approve", "admin"))
    assert not Principal("x", frozenset({"run"})).allows("admin")


def test_require() -> None:
    with pytest.raises(HTTPError) as caught:
        request().require("approve")
    assert (caught.value.status, caught.value.kind) == (403, "forbidden")
    request(principal=Principal(None, frozenset({"run"}))).require("run", "any")


def test_json() -> None:
    assert request(b'{"a": [1]}').json() == {"a": [1]}
    for body in (b"", b"{", b"\xff", b"Infinity", b"[" * 50_000):
        with pytest.raises(HTTPError) as caught:
            request(body).json()
        assert caught.value.status == 400


def test_agent_id() -> None:
    assert agent_id_from("ticket 42 ✓") == "ticket 42 ✓"
    for bad in ("", "x" * 201, "a/b", "a\x00b", "a\nb", "a\x85b"):
        with pytest.raises(HTTPError) as caught:
            agent_id_from(bad)
        assert caught.value.status == 400

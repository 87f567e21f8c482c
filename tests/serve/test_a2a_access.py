"""Who may reach the A2A surface, over real HTTP: a token's cap on runs in flight holds
for A2A's runs as for any other (a non-blocking SendMessage included), and the agent
cards need no token, declare the bearer scheme when the server has tokens and name the
URL the client used (https under TLS)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from serve_agents import Banker, Greeter, gate, scripted

from satsuma.serve import TokenBook, create_token
from satsuma.testing import Reply

pytestmark = pytest.mark.trio

_ids = iter(range(1, 1_000_000))
CARD = "/a2a/greeter/.well-known/agent-card.json"


def rpc(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params}


def send(text: str, **configuration: Any) -> dict[str, Any]:
    message = {"messageId": f"m{next(_ids)}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return rpc("SendMessage", {"message": message, "configuration": configuration})


async def test_a_non_blocking_send_counts_against_the_tokens_cap(
    serve_http: Any, tmp_path: Path
) -> None:
    gate["open"] = trio.Event()
    path = tmp_path / "tokens.txt"
    one = {"Authorization": f"Bearer {create_token(path, name='one', scopes=['run', 'read'])}"}
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "First.", "Second.")
    options = {"model": model, "tokens": TokenBook.from_file(path), "max_runs_per_token": 1}
    async with serve_http([Banker], **options) as served:
        client = served.client
        started = await client.post(
            "/a2a/banker", json=send("go", returnImmediately=True), headers=one
        )
        task = started.json()["result"]["task"]
        assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")

        # The run waits at the gate, holding the token's one slot: every other way to
        # start a run (A2A's three, satsuma's API) is refused with the app's 429.
        for body in (
            send("again", returnImmediately=True),
            send("again, waiting"),
            {**send("streamed"), "method": "SendStreamingMessage"},
        ):
            refused = await client.post("/a2a/banker", json=body, headers=one)
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["type"] == "too_many_runs"
        api = await client.post("/v1/agents/banker/x/runs", json={"prompt": "hi"}, headers=one)
        assert api.status_code == 429

        # Once the run ends, its slot is the token's again.
        subscribe = rpc("SubscribeToTask", {"id": task["id"]})
        async with client.stream("POST", "/a2a/banker", json=subscribe, headers=one) as stream:
            gate["open"].set()
            last = [line async for line in stream.aiter_lines() if line.startswith("data:")][-1]
        final = json.loads(last.removeprefix("data:"))["result"]["statusUpdate"]["status"]
        assert final["state"] == "TASK_STATE_COMPLETED"
        answer = None
        for _ in range(200):  # the slot is given back by a task of the server's own
            answer = await client.post("/a2a/banker", json=send("next"), headers=one)
            if answer.status_code != 429:
                break
            await trio.sleep(0.01)
        assert answer is not None and answer.status_code == 200, answer
        assert answer.json()["result"]["task"]["artifacts"][0]["parts"] == [{"text": "Second."}]


async def test_the_cards_need_no_token_and_declare_the_bearer_scheme(
    serve_http: Any, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.txt"
    token = create_token(path, name="reader", scopes=["read"], agents=["nobody"])
    async with serve_http([Greeter], model=scripted(), tokens=TokenBook.from_file(path)) as served:
        client = served.client
        for card_path in (CARD, "/.well-known/agent-card.json"):
            for headers in ({}, {"Authorization": "Bearer not-a-token"}):
                answer = await client.get(card_path, headers=headers)
                assert answer.status_code == 200, answer.text
                card = answer.json()
                scheme = card["securitySchemes"]["bearer"]
                assert scheme["httpAuthSecurityScheme"] == {"scheme": "Bearer"}
                assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
                # 0.3's shapes beside them, for 0.3 clients.
                assert scheme["type"] == "http" and scheme["scheme"] == "Bearer"
                assert card["security"] == [{"bearer": []}]
        # Everything else under /a2a still asks for a token.
        for method, where in (("POST", "/a2a/greeter"), ("GET", "/a2a/greeter/tasks")):
            assert (await client.request(method, where)).status_code == 401
        assert (await client.post(CARD)).status_code == 405  # read only, token or not
        # A token outside its agents reaches the card (public) but not the agent.
        as_reader = {"Authorization": f"Bearer {token}"}
        assert (await client.get(CARD, headers=as_reader)).status_code == 200
        listed = await client.post("/a2a/greeter", json=rpc("ListTasks", {}), headers=as_reader)
        assert listed.status_code == 403

    async with serve_http([Greeter], model=scripted()) as served:
        card = (await served.client.get(CARD)).json()
        assert not {"securitySchemes", "securityRequirements", "security"} & set(card)


async def test_the_card_names_the_host_the_client_used(serve_http: Any, tmp_path: Path) -> None:
    # With tokens (a server without them answers only to a loopback Host): the card is
    # public all the same.
    create_token(tmp_path / "tokens.txt", name="ops", scopes=["read"])
    async with serve_http([Greeter], model=scripted(), tokens=tmp_path / "tokens.txt") as served:
        card = (await served.client.get(CARD, headers={"Host": "agents.example:8443"})).json()
        assert card["supportedInterfaces"][0]["url"] == "http://agents.example:8443/a2a/greeter"
        assert card["url"] == "http://agents.example:8443/a2a/greeter"
        proxied = {"X-Forwarded-Host": "agents.example", "X-Forwarded-Proto": "https"}
        card = (await served.client.get(CARD, headers=proxied)).json()
        assert card["supportedInterfaces"][0]["url"] == "https://agents.example/a2a/greeter"


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "satsuma test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_under_tls_the_card_says_https(serve_http: Any, tmp_path: Path) -> None:
    cert_file, key_file = _self_signed(tmp_path)
    trusted = ssl.create_default_context(cafile=str(cert_file))
    async with serve_http(
        [Greeter], model=scripted("Hi."), certfile=cert_file, keyfile=key_file
    ) as served:
        assert served.url.startswith("https://127.0.0.1:")
        async with httpx.AsyncClient(base_url=served.url, verify=trusted) as client:
            card = (await client.get(CARD)).json()
            endpoint = card["supportedInterfaces"][0]["url"]
            assert endpoint == f"{served.url}/a2a/greeter"
            # The endpoint the card names answers, over TLS.
            answer = await client.post(endpoint, json=send("hi"))
            assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

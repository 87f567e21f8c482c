"""The A2A surface over real HTTP with httpx: the card, every method of the JSON-RPC
binding, the SSE stream, the approval round, and the spec's errors for bad requests."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx
import pytest
import trio
from serve_agents import Banker, Greeter, done, gate, scripted, two_transfers

import satsuma
from satsuma.serve import TokenBook, create_token
from satsuma.testing import Reply

pytestmark = pytest.mark.trio

_ids = iter(range(1, 1_000_000))


def rpc(method: str, params: Any = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
    if params is not None:
        body["params"] = params
    return {**body, **extra}


def user(text: str | None = None, *, data: Any = None, **ids: str) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if data is not None:
        parts.append({"data": data})
    return {"messageId": f"m{next(_ids)}", "role": "ROLE_USER", "parts": parts, **ids}


async def call(client: httpx.AsyncClient, path: str, method: str, params: Any = None) -> Any:
    answer = await client.post(path, json=rpc(method, params), headers={"A2A-Version": "1.0"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["a2a-version"] == "1.0"
    body = answer.json()
    assert body["jsonrpc"] == "2.0"
    return body


async def result(client: httpx.AsyncClient, path: str, method: str, params: Any = None) -> Any:
    body = await call(client, path, method, params)
    assert "error" not in body, body
    return body["result"]


async def error(client: httpx.AsyncClient, path: str, method: str, params: Any = None) -> Any:
    body = await call(client, path, method, params)
    assert "result" not in body, body
    return body["error"]


async def sse(client: httpx.AsyncClient, path: str, body: Any) -> list[dict[str, Any]]:
    items = []
    async with client.stream("POST", path, json=body) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        async for line in answer.aiter_lines():
            if line.startswith("data:"):
                items.append(json.loads(line.removeprefix("data:").strip()))
    return items


async def test_the_card_names_the_json_rpc_endpoint(serve_http: Any) -> None:
    async with serve_http([Banker, Greeter], model=scripted()) as served:
        card = (await served.client.get("/a2a/banker/.well-known/agent-card.json")).json()
        assert card["name"] == "banker"
        assert card["supportedInterfaces"] == [
            {
                "url": f"{served.url}/a2a/banker",
                "protocolBinding": "JSONRPC",
                "protocolVersion": "1.0",
            }
        ]
        assert card["capabilities"] == {"streaming": True, "pushNotifications": False}
        # Two classes: the root card is not one of them.
        assert (await served.client.get("/.well-known/agent-card.json")).status_code == 404
        assert (
            await served.client.get("/a2a/nobody/.well-known/agent-card.json")
        ).status_code == 404


async def test_one_class_has_the_root_card_too(serve_http: Any) -> None:
    async with serve_http([Greeter], model=scripted()) as served:
        card = (await served.client.get("/.well-known/agent-card.json")).json()
        assert card["name"] == "greeter"


async def test_send_message_completes_with_the_output_as_artifact(serve_http: Any) -> None:
    async with serve_http([Greeter], model=scripted("Hello there.", "Again.")) as served:
        got = await result(served.client, "/a2a/greeter", "SendMessage", {"message": user("hi")})
        task = got["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert task["artifacts"][0]["parts"] == [{"text": "Hello there."}]
        assert task["history"][0]["parts"] == [{"text": "hi"}]
        context = task["contextId"]
        # The same context is the same conversation; the 0.3 name works too.
        again = await result(
            served.client,
            "/a2a/greeter",
            "message/send",
            {"message": user("more", contextId=context)},
        )
        # Named by its 0.3 name, it is answered in 0.3's shapes: the task itself.
        assert again["kind"] == "task" and again["status"]["state"] == "completed"
        assert again["contextId"] == context
        again = {"task": again}
        conversation = await served.client.get(f"/v1/agents/greeter/{context}/messages")
        assert len(conversation.json()["messages"]) == 4
        got = await result(served.client, "/a2a/greeter", "GetTask", {"id": task["id"]})
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = await result(served.client, "/a2a/greeter", "ListTasks", {"contextId": context})
        assert [t["id"] for t in listed["tasks"]] == [again["task"]["id"], task["id"]]
        first = await result(served.client, "/a2a/greeter", "ListTasks", {"pageSize": 1})
        assert len(first["tasks"]) == 1 and first["nextPageToken"] == "1"


async def test_non_blocking_send_and_cancel(serve_http: Any) -> None:
    gate["open"] = trio.Event()
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "never")
    async with serve_http([Banker], model=model) as served:
        got = await result(
            served.client,
            "/a2a/banker",
            "SendMessage",
            {"message": user("go"), "configuration": {"returnImmediately": True}},
        )
        task_id = got["task"]["id"]
        assert got["task"]["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        cancelled = await result(served.client, "/a2a/banker", "CancelTask", {"id": task_id})
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
        again = await error(served.client, "/a2a/banker", "tasks/cancel", {"id": task_id})
        assert again["code"] == -32002


async def test_the_approval_round(serve_http: Any) -> None:
    done.clear()
    model = scripted(*two_transfers("Both done."))
    async with serve_http([Banker], model=model) as served:
        got = await result(served.client, "/a2a/banker", "SendMessage", {"message": user("pay")})
        task = got["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        question = task["status"]["message"]
        pending = question["parts"][1]["data"]["pending"]
        assert [p["tool"] for p in pending] == ["transfer", "transfer"]
        assert pending[0]["input"] == {"to": "bob", "amount": 10}
        decisions = {
            pending[0]["call_id"]: {"decision": "approve"},
            pending[1]["call_id"]: {"decision": "deny", "reason": "too small"},
        }
        message = user(data={"decisions": decisions}, taskId=task["id"])
        # A message without decisions is refused and decides nothing.
        refused = await error(
            served.client, "/a2a/banker", "SendMessage", {"message": user("ok", taskId=task["id"])}
        )
        assert refused["code"] == -32602 and "decisions" in refused["message"]
        resumed = await result(served.client, "/a2a/banker", "SendMessage", {"message": message})
        assert resumed["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert resumed["task"]["artifacts"][0]["parts"] == [{"text": "Both done."}]
        assert done == ["transfer 10 to bob"]
        late = await error(served.client, "/a2a/banker", "SendMessage", {"message": message})
        assert late["code"] == -32004


async def test_streaming_a_message(serve_http: Any) -> None:
    gate["open"] = trio.Event()
    gate["open"].set()
    model = scripted(Reply(tool_calls=[("slow", {"label": "a"})]), "Done slowly.")
    async with serve_http([Banker], model=model) as served:
        items = await sse(
            served.client,
            "/a2a/banker",
            rpc("SendStreamingMessage", {"message": user("go")}),
        )
        assert all(i["jsonrpc"] == "2.0" and "result" in i for i in items)
        kinds = [next(iter(i["result"])) for i in items]
        assert kinds[0] == "task"
        assert kinds[-2:] == ["artifactUpdate", "statusUpdate"]
        assert set(kinds[1:-2]) <= {"statusUpdate"}
        assert items[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert items[-2]["result"]["artifactUpdate"]["artifact"]["parts"] == [
            {"text": "Done slowly."}
        ]
        progress = [
            i["result"]["statusUpdate"]["status"].get("message", {}).get("parts", [{}])[0]
            for i in items[1:-2]
        ]
        assert {"text": "calling slow"} in progress


async def test_subscribing_follows_a_task_to_its_end(serve_http: Any) -> None:
    gate["open"] = trio.Event()
    model = scripted(Reply(tool_calls=[("slow", {"label": "b"})]), "Done.")
    async with serve_http([Banker], model=model) as served:
        got = await result(
            served.client,
            "/a2a/banker",
            "SendMessage",
            {"message": user("go"), "configuration": {"blocking": False}},
        )
        task_id = got["task"]["id"]
        items: list[Any] = []
        subscribe = rpc("SubscribeToTask", {"id": task_id})
        async with served.client.stream("POST", "/a2a/banker", json=subscribe) as answer:
            async for line in answer.aiter_lines():
                if line.startswith("data:"):
                    items.append(json.loads(line.removeprefix("data:")))
                    # Subscribed while the tool waits: now let it finish.
                    gate["open"].set()
        assert items[0]["result"]["task"]["id"] == task_id
        assert items[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        ended = await error(served.client, "/a2a/banker", "tasks/resubscribe", {"id": task_id})
        assert ended["code"] == -32004


@pytest.mark.parametrize(
    "body,code",
    [
        (b"{not json", -32700),
        (b"[]", -32600),
        (b'{"jsonrpc": "2.0", "method": "GetTask"}', -32600),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask"}', -32600),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tasks/delete"}', -32601),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": []}', -32602),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}', -32001),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}', -32602),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig",'
            b' "params": {}}',
            -32003,
        ),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}', -32007),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
            b'{"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "http://x.invalid"}]}}}',
            -32005,
        ),
        (
            b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
            b'{"messageId": "m", "role": "ROLE_USER", "contextId": "a/b", "parts": [{"text": "x"}]}}}',
            -32602,
        ),
    ],
)
async def test_bad_requests_are_the_specs_errors(serve_http: Any, body: bytes, code: int) -> None:
    async with serve_http([Greeter], model=scripted()) as served:
        answer = await served.client.post("/a2a/greeter", content=body)
        assert answer.status_code == 200
        assert answer.json()["error"]["code"] == code, answer.json()
        assert "Traceback" not in answer.text


async def test_an_unsupported_version_is_refused(serve_http: Any) -> None:
    async with serve_http([Greeter], model=scripted()) as served:
        answer = await served.client.post(
            "/a2a/greeter", json=rpc("GetTask", {"id": "x"}), headers={"A2A-Version": "2.0"}
        )
        assert answer.json()["error"]["code"] == -32009
        assert (await served.client.get("/a2a/greeter")).status_code == 405
        assert (await served.client.post("/a2a/nobody", json=rpc("GetTask"))).status_code == 404


async def test_tokens_and_scopes(serve_http: Any, tmp_path: Any) -> None:
    path = tmp_path / "tokens.txt"
    reader = create_token(path, name="reader", scopes=["read"], agents=["greeter"])
    runner = create_token(path, name="runner", scopes=["run", "read"], agents=["greeter"])
    async with serve_http(
        [Greeter], model=scripted("Hi."), tokens=TokenBook.from_file(path)
    ) as served:
        assert (await served.client.post("/a2a/greeter", json=rpc("ListTasks"))).status_code == 401
        as_reader = {"Authorization": f"Bearer {reader}"}
        denied = await served.client.post(
            "/a2a/greeter", json=rpc("SendMessage", {"message": user("hi")}), headers=as_reader
        )
        assert denied.status_code == 403
        sent = await served.client.post(
            "/a2a/greeter",
            json=rpc("SendMessage", {"message": user("hi")}),
            headers={"Authorization": f"Bearer {runner}"},
        )
        assert sent.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        card = await served.client.get("/.well-known/agent-card.json", headers=as_reader)
        assert "bearer" in card.json()["securitySchemes"]


async def test_the_0_3_names_answer_in_0_3_shapes(serve_http: Any) -> None:
    from a2a.compat.v0_3 import types as v03

    model = scripted(*two_transfers("Paid."), "Streamed.")
    async with serve_http([Banker], model=model) as served:
        message = {
            "kind": "message",
            "messageId": "m-03",
            "role": "user",
            "parts": [{"kind": "text", "text": "pay"}],
        }
        paused = v03.Task.model_validate(
            await result(served.client, "/a2a/banker", "message/send", {"message": message})
        )
        assert paused.status.state == v03.TaskState.input_required
        assert paused.status.message is not None
        pending = paused.status.message.parts[1].root.data["pending"]  # type: ignore[union-attr]
        decisions = {p["call_id"]: {"decision": "approve"} for p in pending}
        reply = {
            "kind": "message",
            "messageId": "m-03b",
            "role": "user",
            "taskId": paused.id,
            "parts": [{"kind": "data", "data": {"decisions": decisions}}],
        }
        done_task = v03.Task.model_validate(
            await result(served.client, "/a2a/banker", "message/send", {"message": reply})
        )
        assert done_task.status.state == v03.TaskState.completed
        assert done_task.artifacts is not None
        assert done_task.artifacts[0].parts[0].root.text == "Paid."  # type: ignore[union-attr]
        got = v03.Task.model_validate(
            await result(served.client, "/a2a/banker", "tasks/get", {"id": paused.id})
        )
        assert got.id == paused.id
        items = await sse(
            served.client,
            "/a2a/banker",
            rpc("message/stream", {"message": {**message, "messageId": "m-03c"}}),
        )
        results = [v03.SendStreamingMessageResponse.model_validate(i).root for i in items]
        kinds = [r.result.kind for r in results]  # type: ignore[union-attr]
        assert kinds[0] == "task" and kinds[-2:] == ["artifact-update", "status-update"]
        assert results[-1].result.final is True  # type: ignore[union-attr]


@attrs.frozen
class Refund:
    amount: float
    reason: str


class Refunder(satsuma.Agent[Refund]):
    """Decides refunds."""

    name = "refunder"


async def test_a_typed_output_is_a_data_artifact(serve_http: Any) -> None:
    answer = Reply(tool_calls=[("final_answer", {"amount": 12.5, "reason": "late"})])
    async with serve_http([Refunder], model=scripted(answer)) as served:
        card = (await served.client.get("/.well-known/agent-card.json")).json()
        assert card["description"] == "Decides refunds."
        got = await result(served.client, "/a2a/refunder", "SendMessage", {"message": user("?")})
        [artifact] = got["task"]["artifacts"]
        assert artifact["name"] == "output"
        assert artifact["parts"] == [
            {"data": {"amount": 12.5, "reason": "late"}, "mediaType": "application/json"}
        ]


async def test_a_client_that_leaves_a_stream_cancels_nothing(serve_http: Any) -> None:
    gate["open"] = trio.Event()
    model = scripted(Reply(tool_calls=[("slow", {"label": "c"})]), "Finished anyway.")
    async with serve_http([Banker], model=model) as served:
        body = json.dumps(rpc("SendStreamingMessage", {"message": user("go")})).encode()
        host, port = served.url.removeprefix("http://").split(":")
        # A raw connection, to leave it as a client that goes away does: mid-stream.
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(
            b"POST /a2a/banker HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        seen = b""
        while b"\n\n" not in seen.partition(b"data:")[2]:
            seen += await stream.receive_some()
        await stream.aclose()
        first = seen.partition(b"data:")[2].partition(b"\n\n")[0]
        task_id = json.loads(first)["result"]["task"]["id"]
        # Gone; the run goes on, and ends when its tool does.
        gate["open"].set()
        run = await served.client.get(f"/v1/runs/{task_id}")
        while run.json()["status"] not in ("completed", "cancelled", "failed"):
            await trio.sleep(0.01)
            run = await served.client.get(f"/v1/runs/{task_id}")
        got = await result(served.client, "/a2a/banker", "GetTask", {"id": task_id})
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        assert got["artifacts"][0]["parts"] == [{"text": "Finished anyway."}]

"""The official A2A SDK's client (a2a-sdk, asyncio) against a satsuma server: run by
tests/serve/test_a2a_sdk.py in its own process as ``python a2a_sdk_client.py URL TOKEN``.
It prints one JSON object of what it saw; the test checks it."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format


def message(text: str | None = None, *, data: Any = None, task_id: str = "") -> a2a.Message:
    parts = []
    if text is not None:
        parts.append(a2a.Part(text=text))
    if data is not None:
        parts.append(json_format.ParseDict({"data": data}, a2a.Part()))
    return a2a.Message(
        message_id=f"m-{id(parts)}", role=a2a.ROLE_USER, parts=parts, task_id=task_id
    )


async def last(client: Any, request: a2a.SendMessageRequest) -> list[a2a.StreamResponse]:
    return [event async for event in client.send_message(request)]


async def main(url: str, token: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        blocking = ClientConfig(streaming=False, httpx_client=http)
        card = await A2ACardResolver(http, f"{url}/a2a/greeter").get_agent_card()
        seen["card"] = {
            "name": card.name,
            "streaming": card.capabilities.streaming,
            "url": card.supported_interfaces[0].url,
        }
        greeter = await create_client(card, blocking)

        # Send a message and get the completed task with its artifact.
        [answer] = await last(greeter, a2a.SendMessageRequest(message=message("hello")))
        task = answer.task
        seen["send"] = {
            "state": a2a.TaskState.Name(task.status.state),
            "artifact": task.artifacts[0].parts[0].text,
            "context": task.context_id,
        }
        # Get and list tasks.
        got = await greeter.get_task(a2a.GetTaskRequest(id=task.id))
        seen["get"] = a2a.TaskState.Name(got.status.state)
        listed = await greeter.list_tasks(a2a.ListTasksRequest(context_id=task.context_id))
        seen["list"] = [t.id == task.id for t in listed.tasks]

        # Stream a message.
        streaming = ClientConfig(streaming=True, httpx_client=http)
        streamer = await create_client(f"{url}/a2a/greeter", streaming)
        events = await last(streamer, a2a.SendMessageRequest(message=message("stream it")))
        seen["stream"] = [e.WhichOneof("payload") for e in events]
        seen["stream_end"] = a2a.TaskState.Name(events[-1].status_update.status.state)
        seen["stream_artifact"] = [
            e.artifact_update.artifact.parts[0].text
            for e in events
            if e.HasField("artifact_update")
        ]

        # Cancel a task that waits on a slow tool.
        polling = ClientConfig(streaming=False, polling=True, httpx_client=http)
        banker = await create_client(f"{url}/a2a/banker", polling)
        [started] = await last(banker, a2a.SendMessageRequest(message=message("go slow")))
        follower = await create_client(f"{url}/a2a/banker", streaming)
        subscription = follower.subscribe(a2a.SubscribeToTaskRequest(id=started.task.id))
        first = await anext(subscription)
        cancelled = await banker.cancel_task(a2a.CancelTaskRequest(id=started.task.id))
        rest = [event async for event in subscription]
        seen["subscribe"] = [first.WhichOneof("payload"), rest[-1].WhichOneof("payload")]
        seen["subscribe_end"] = a2a.TaskState.Name(rest[-1].status_update.status.state)
        seen["cancel"] = a2a.TaskState.Name(cancelled.status.state)
        try:
            await banker.cancel_task(a2a.CancelTaskRequest(id=started.task.id))
            seen["cancel_again"] = "no error"
        except Exception as error:  # the SDK's TaskNotCancelableError
            seen["cancel_again"] = type(error).__name__

        # The approval round: input-required, then a message with the decisions.
        banker = await create_client(f"{url}/a2a/banker", blocking)
        [paused] = await last(banker, a2a.SendMessageRequest(message=message("pay")))
        status = paused.task.status
        seen["paused"] = a2a.TaskState.Name(status.state)
        pending = json_format.MessageToDict(status.message.parts[1].data)["pending"]
        decisions = {p["call_id"]: {"decision": "approve"} for p in pending}
        reply = message(data={"decisions": decisions}, task_id=paused.task.id)
        [resumed] = await last(banker, a2a.SendMessageRequest(message=reply))
        seen["resumed"] = a2a.TaskState.Name(resumed.task.status.state)
        seen["resumed_artifact"] = resumed.task.artifacts[0].parts[0].text
        for client in (greeter, streamer, banker, follower):
            await client.close()
    return seen


if __name__ == "__main__":
    sys.stdout.write(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))) + "\n")

"""The official A2A SDK's client (a2a-sdk, asyncio) meeting each error of the
specification that a satsuma server can give: run by tests/serve/test_a2a_sdk.py in its
own process as ``python a2a_sdk_errors.py URL TOKEN``. It prints one JSON object, each
failure path's name to what the SDK raised (its class name); the test checks it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a


def message(*parts: a2a.Part, task_id: str = "") -> a2a.Message:
    return a2a.Message(
        message_id=f"m-{id(parts)}", role=a2a.ROLE_USER, parts=parts, task_id=task_id
    )


async def outcome(call: Callable[[], Awaitable[Any]]) -> str:
    """What the SDK raised (its class name), or "no error"."""
    try:
        await call()
    except Exception as error:
        return type(error).__name__
    return "no error"


async def drain(events: AsyncIterator[Any]) -> None:
    async for _ in events:
        pass


async def send(client: Any, request: a2a.SendMessageRequest) -> None:
    await drain(client.send_message(request))


async def main(url: str, token: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        config = ClientConfig(streaming=False, httpx_client=http)
        streaming = ClientConfig(streaming=True, httpx_client=http)
        greeter = await create_client(f"{url}/a2a/greeter", config)
        follower = await create_client(f"{url}/a2a/greeter", streaming)
        banker = await create_client(f"{url}/a2a/banker", config)

        hello = a2a.SendMessageRequest(message=message(a2a.Part(text="hello")))
        done = [event async for event in greeter.send_message(hello)][-1].task

        seen["task_not_found"] = await outcome(
            lambda: greeter.get_task(a2a.GetTaskRequest(id="no-such-task"))
        )
        # A task of another agent is not found at this agent's endpoint.
        seen["other_agents_task"] = await outcome(
            lambda: banker.get_task(a2a.GetTaskRequest(id=done.id))
        )
        seen["cancel_ended"] = await outcome(
            lambda: greeter.cancel_task(a2a.CancelTaskRequest(id=done.id))
        )
        # A message to a task that does not wait for input; a stream of an ended task.
        to_done = message(a2a.Part(text="more"), task_id=done.id)
        seen["message_to_ended_task"] = await outcome(
            lambda: send(greeter, a2a.SendMessageRequest(message=to_done))
        )
        seen["subscribe_ended"] = await outcome(
            lambda: drain(follower.subscribe(a2a.SubscribeToTaskRequest(id=done.id)))
        )
        file_part = message(a2a.Part(url="https://files.example/report.pdf"))
        seen["file_part"] = await outcome(
            lambda: send(greeter, a2a.SendMessageRequest(message=file_part))
        )
        empty = message(a2a.Part(text="   "))
        seen["empty_message"] = await outcome(
            lambda: send(greeter, a2a.SendMessageRequest(message=empty))
        )
        seen["page_too_big"] = await outcome(
            lambda: greeter.list_tasks(a2a.ListTasksRequest(page_size=1000))
        )
        seen["push_config"] = await outcome(
            lambda: greeter.create_task_push_notification_config(
                a2a.TaskPushNotificationConfig(task_id=done.id, url="https://hooks.example/x")
            )
        )
        for client in (greeter, follower, banker):
            await client.close()

    # A version the server does not speak, named in the A2A-Version header.
    versioned = {**headers, "A2A-Version": "9.0"}
    async with httpx.AsyncClient(headers=versioned, timeout=30) as http:
        future = await create_client(
            f"{url}/a2a/greeter", ClientConfig(streaming=False, httpx_client=http)
        )
        seen["version"] = await outcome(lambda: future.get_task(a2a.GetTaskRequest(id=done.id)))
        await future.close()
    return seen


if __name__ == "__main__":
    sys.stdout.write(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))) + "\n")

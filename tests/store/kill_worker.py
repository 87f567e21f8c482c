"""The worker of the kill test (test_kill.py): one process running an agent on a SQLite
store, which the test kills with SIGKILL at random points and starts again.

Usage: ``python kill_worker.py DB LOG TARGET``, or ``python kill_worker.py --fork-server``
(see serve_forks) to start many workers quickly.

It imports everything, prints ``LOADED`` and waits for a line on stdin (so the test can
start the next worker while the current one runs), then opens the agent, prints ``READY``,
resumes the interrupted run if there is one, and runs tasks (``do task N``) until TARGET
tasks are done; then prints ``DONE``.

A task is ``STEPS`` turns; in each the model asks for two calls: ``charge`` (not
idempotent: it appends its side effect to LOG, fsynced, after its work) and ``lookup``
(idempotent: it may run again on resume, and logs each run). The model is a
FunctionModel computing its reply from the conversation, so a restarted worker goes on
where the stored conversation stands. Progress lines on stdout (``model+``/``model-``,
``tool+ NAME ID``/``tool- NAME ID``) tell the test where a kill landed.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import TextIO

import trio

import satsuma
from satsuma import Message
from satsuma.store import SQLiteStore
from satsuma.testing import FunctionModel, Reply
from satsuma.tools import ToolCall

AGENT_ID = "kill-agent"
STEPS = 4
PROMPT = re.compile(r"^do task (\d+)$")
FINAL = re.compile(r"^task (\d+) done$")


out: TextIO = sys.stdout  # where progress lines go


def say(*words: object) -> None:
    out.write(" ".join(map(str, words)) + "\n")
    out.flush()


def append_line(path: str, line: str) -> None:
    """Append one line to the side-effect log and make it durable."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def pause(*keys: int) -> float:
    """A deterministic delay of 5 to 20 ms."""
    return 0.005 + (sum(key * 7919 for key in keys) % 16) / 1000


def prompt_task(message: Message) -> int | None:
    """The task number if this is a user message holding a task prompt."""
    if message.role != "user":
        return None
    for block in message.content:
        if block.get("type") == "text":
            match = PROMPT.match(block.get("text", ""))
            if match:
                return int(match.group(1))
    return None


def progress(messages: Sequence[Message]) -> tuple[int, int]:
    """The current task and how many of its steps the model has asked for."""
    for index in range(len(messages) - 1, -1, -1):
        task = prompt_task(messages[index])
        if task is not None:
            steps = sum(
                1
                for message in messages[index + 1 :]
                if message.role == "assistant"
                and any(block.get("type") == "tool_use" for block in message.content)
            )
            return task, steps
    raise RuntimeError("no task prompt in the conversation")


def tasks_done(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m.role == "assistant" and FINAL.match(m.text))


@satsuma.tool
async def charge(ctx: satsuma.ToolContext, task: int, step: int) -> str:
    """Charge the customer for one step of a task (not idempotent)."""
    say("tool+", "charge", ctx.tool_use_id)
    await trio.sleep(pause(task, step, 1))
    # The side effect is recorded once it has happened, as a real one would be.
    append_line(ctx.extra["log"], f"charge {ctx.tool_use_id} {task} {step}")
    say("tool-", "charge", ctx.tool_use_id)
    return f"charged {task}.{step}"


@satsuma.tool(idempotent=True)
async def lookup(ctx: satsuma.ToolContext, task: int, step: int) -> str:
    """Look up the state of one step of a task (idempotent)."""
    say("tool+", "lookup", ctx.tool_use_id)
    await trio.sleep(pause(task, step, 2))
    append_line(ctx.extra["log"], f"lookup {ctx.tool_use_id} {task} {step}")
    say("tool-", "lookup", ctx.tool_use_id)
    return f"step {task}.{step} ok"


class Payer(satsuma.Agent):
    name = "payer"
    tools = [charge, lookup]
    max_iterations = 20


async def reply(request: satsuma.ModelRequest) -> Reply | str:
    say("model+")
    task, steps = progress(request.messages)
    await trio.sleep(pause(task, steps, 3))
    say("model-")
    if steps >= STEPS:
        return f"task {task} done"
    # Ids made from the step: a model call repeated after a kill asks for the same calls.
    arguments = {"task": task, "step": steps}
    return Reply(
        tool_calls=[
            ToolCall(f"toolu_{task}_{steps}_charge", "charge", arguments),
            ToolCall(f"toolu_{task}_{steps}_lookup", "lookup", arguments),
        ]
    )


async def main(db: str, log: str, target: int) -> None:
    async with (
        SQLiteStore(db) as store,
        satsuma.open_agent(
            Payer,
            model=FunctionModel(reply),
            context={"log": log},
            store=store,
            agent_id=AGENT_ID,
        ) as agent,
    ):
        say("READY")
        for record in await store.runs(AGENT_ID):
            if record.status == "interrupted":
                say("resume", record.run_id)
                result = await agent.resume(record.run_id)
                if result.status != "completed":
                    raise RuntimeError(f"resumed run ended {result.status}: {result.error}")
        while (done := tasks_done(agent.history)) < target:
            result = await agent.run(f"do task {done + 1}")
            if result.status != "completed":
                raise RuntimeError(f"run ended {result.status}: {result.error}")
    say("DONE")


def serve_forks() -> None:
    """For each line ``DB LOG TARGET OUT`` on stdin, fork a worker whose progress lines go
    to the file OUT; report ``PID n`` when it starts and ``EXIT n code`` when it ends.
    Forked after the imports, a worker starts in milliseconds instead of a second."""
    global out
    say("LOADED")
    while line := sys.stdin.readline():
        db, log, target, out_path = line.split()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                out = open(out_path, "w")  # noqa: SIM115  (os._exit below closes it)
                trio.run(main, db, log, int(target))
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        say("PID", pid)
        _, status = os.waitpid(pid, 0)
        say("EXIT", pid, os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    if sys.argv[1:] == ["--fork-server"]:
        serve_forks()
    else:
        say("LOADED")
        if sys.stdin.readline().strip() == "GO":
            trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))

"""The queue of an agent's requests: bounded, first in first out, with one reader (the
actor's task, or the task of whichever incarnation of a supervised agent is running)
and any number of senders.

It is not a ``trio.open_memory_channel``: a channel pair with its shared state, its
clones and its statistics is made, checked and closed for every conversation, which
for a conversation of one run cost more than its own request handling. Here the
reader's task and the senders held back by a full mailbox wait through trio's lowest
parking call (``wait_task_rescheduled``), and a request is handed straight to a reader
that waits for one, as a channel hands it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import final

import outcome
import trio
import trio.lowlevel

from .._exceptions import AgentUnavailable
from ._job import Request, ResetRequest

__all__ = ["Mailbox", "MailboxClosed"]


class MailboxClosed(Exception):
    """Raised to a sender of a closed mailbox (the actor says AgentUnavailable)."""


@final
class Mailbox:
    """The queue of an agent's requests. ``open_agent``'s agent has its own; a
    supervised agent's belongs to its child and outlives each incarnation, so that runs
    queued behind one that crashed are served by the restarted agent."""

    __slots__ = ("_queue", "_reader", "_senders", "closed", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.closed = False
        self._queue: deque[Request] = deque()
        # The task waiting in ``take`` for a request, if any (one reader at a time).
        self._reader: trio.lowlevel.Task | None = None
        # Senders held back by a full mailbox, in the order they came, with their
        # requests: a request joins the queue only when its turn comes, so a sender
        # that gives up (cancelled) has sent nothing.
        self._senders: dict[trio.lowlevel.Task, Request] = {}

    def is_empty(self) -> bool:
        """Whether no request waits, in the queue or held back with its sender."""
        return not self._queue and not self._senders

    def put_nowait(self, request: Request) -> bool:
        """Queue ``request`` (or hand it to the waiting reader) if there is room; False
        when the mailbox is full. No schedule point.

        Raises:
            MailboxClosed: the mailbox is closed.
        """
        if self.closed:
            raise MailboxClosed
        reader = self._reader
        if reader is not None:
            self._reader = None
            trio.lowlevel.reschedule(reader, outcome.Value(request))
            return True
        if self._senders or len(self._queue) >= self.size:
            return False
        self._queue.append(request)
        return True

    async def put(self, request: Request) -> None:
        """Queue ``request``, waiting for room while the mailbox is full. Cancelled while
        it waits, it has queued nothing.

        Raises:
            MailboxClosed: the mailbox is (or gets) closed before the request is queued.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.put_nowait(request):
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        task = trio.lowlevel.current_task()
        self._senders[task] = request

        def abort(_: Callable[[], object]) -> trio.lowlevel.Abort:
            del self._senders[task]
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def take_nowait(self) -> Request | None:
        """The next request, or None when none waits (``closed`` tells whether one may
        still come)."""
        queue = self._queue
        if queue:
            request = queue.popleft()
            if self._senders:
                # Room for the first sender held back: its request joins the queue.
                task, held = next(iter(self._senders.items()))
                del self._senders[task]
                queue.append(held)
                trio.lowlevel.reschedule(task, outcome.Value(None))
            return request
        if self._senders:
            task, held = next(iter(self._senders.items()))
            del self._senders[task]
            trio.lowlevel.reschedule(task, outcome.Value(None))
            return held
        return None

    async def take(self) -> Request | None:
        """The next request, waiting for one; None once the mailbox is closed and empty.
        One already waiting is taken without a schedule point (one more batch of the
        scheduler); cancellation is still checked first, so that a stopping agent
        leaves queued requests to ``end_queued``."""
        await trio.lowlevel.checkpoint_if_cancelled()
        request = self.take_nowait()
        if request is not None or self.closed:
            return request
        task = self._reader = trio.lowlevel.current_task()

        def abort(_: Callable[[], object]) -> trio.lowlevel.Abort:
            if self._reader is task:
                self._reader = None
            return trio.lowlevel.Abort.SUCCEEDED

        taken: Request | None = await trio.lowlevel.wait_task_rescheduled(abort)
        return taken

    def close(self) -> None:
        """Refuse every request from now on: the reader waiting is told there are none
        (its ``take`` returns None), and the senders held back raise MailboxClosed. The
        requests already queued stay for ``end_queued``."""
        if self.closed:
            return
        self.closed = True
        reader = self._reader
        if reader is not None:
            self._reader = None
            trio.lowlevel.reschedule(reader, outcome.Value(None))
        senders = self._senders
        self._senders = {}
        for task in senders:
            trio.lowlevel.reschedule(task, outcome.Error(MailboxClosed()))

    def end_queued(self, crash: Callable[[], BaseException] | None, why: str, agent: str) -> None:
        """Answer every request still waiting, which will not be served: each raises a
        fresh ``crash()`` if given; otherwise a run ends ``cancelled`` (``the agent
        stopped``) and a reset raises AgentUnavailable saying ``why`` — a reset never
        pretends to have happened."""
        while (request := self.take_nowait()) is not None:
            if crash is not None:
                request.fail(crash())
            elif isinstance(request, ResetRequest):
                request.fail(AgentUnavailable(agent, why))
            else:
                request.stopped()

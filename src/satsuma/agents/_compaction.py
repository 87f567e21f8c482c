"""Compaction: a history processor that replaces a long conversation's older turns with
one summary, written by a model call and stored beside the full history.

When a request would pass ``max_tokens``, the messages before the newest
``keep_last_tokens`` (whole exchanges: a ``tool_use`` is never parted from its
``tool_result``) are summarised, together with the summary before them, if any. The
request then carries the summary at the head of its first kept user message, and the
messages from there on verbatim. Until the conversation grows past ``max_tokens`` again,
every request begins the same way, so the prompt cache keeps serving it.

The summary is a ``satsuma.store.Summary`` (``Store.add_summary``): the full
conversation stays in the store as it was, and an agent that starts again (a resume, a
supervisor's restart, another node of a cluster) reads the newest summary back and goes
on from it without summarising again.

If the summary call fails (a ``ModelError``, an empty answer), the run goes on: that
request is trimmed instead, to the same newest messages, after the last summary there
is, and a warning is logged; the next call tries to summarise again. Cancellation is
never such a failure: it goes through.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs

from .._exceptions import ModelError
from .._messages import Message, Usage, message_size
from ..models import ModelRequest, ModelResponse, count_input_tokens, estimate_input_tokens
from ..store import Summary
from . import _spending
from ._budget import budgeted
from ._history import TrimMemo, exchange_starts, starts_exchange
from ._summary_state import CompactionState

if TYPE_CHECKING:
    from ._runstate import Run

__all__ = ["Compaction", "compacted", "compacted_view"]

logger = logging.getLogger("satsuma.agents")

DEFAULT_INSTRUCTIONS: Final = (
    "You summarise the earlier part of a conversation between a user and an AI agent, "
    "so that the agent can go on without it. Keep every fact, decision, name, number, "
    "file, tool result and open task the agent may need later; drop greetings and "
    "repetition. Write plain prose or a short list, in the conversation's language, and "
    "nothing else."
)


def _tokens(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"Compaction.{attribute.name} must be a positive integer of tokens, got: {value!r}"
        )


def _text(instance: object, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(
            f"Compaction.{attribute.name} must be a non-empty str or None, got: {value!r}"
        )


def _count_mode(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in ("estimate", "api"):
        raise ValueError(f'Compaction.count must be "estimate" or "api", got: {value!r}')


@final
@attrs.frozen
class Compaction:
    """Keep each request under ``max_tokens`` input tokens (tools, system prompt and
    messages together) by summarising the older turns with a model call.

    Past the limit, the messages before the newest ``keep_last_tokens`` become one
    summary (with the previous summary, if any); the requests then begin with it until
    the limit is reached again. The summary is stored beside the full history (see
    ``satsuma.store.Summary``), which stays in the store untouched.

    Args:
        max_tokens: The most input tokens a request may carry before older turns are
            summarised.
        keep_last_tokens: About how many tokens the request keeps verbatim after a
            summary: the newest whole exchanges (at least one), counted with the tools
            and system prompt as ``max_tokens`` is. Below ``max_tokens``; the summary
            is written in at most half the room between the two (and at most the
            agent's ``max_tokens``), so that the request after it stays under the limit.
        model: The model id that writes the summary, through the agent's provider;
            None: the agent's own model.
        instructions: The summarising system prompt, instead of satsuma's.
        count: How a request's tokens are counted before it is sent: ``"estimate"``
            (characters, at the tokens-per-character rate of the usage the API last
            reported), or ``"api"`` (the provider's count endpoint, one more request per
            call, free; the estimate where the provider has none).

    Raises:
        ValueError: a field makes no sense (not a positive integer, ``keep_last_tokens``
            not below ``max_tokens``, an empty or non-str ``model`` or
            ``instructions``, another ``count``); the message names the field.
    """

    max_tokens: int = attrs.field(validator=_tokens)
    keep_last_tokens: int = attrs.field(validator=_tokens)
    model: str | None = attrs.field(default=None, validator=_text)
    instructions: str | None = attrs.field(default=None, validator=_text)
    count: Literal["estimate", "api"] = attrs.field(
        default="estimate", validator=_count_mode, kw_only=True
    )

    def __attrs_post_init__(self) -> None:
        if self.keep_last_tokens >= self.max_tokens:
            raise ValueError(
                f"Compaction.keep_last_tokens ({self.keep_last_tokens}) must be below "
                f"max_tokens ({self.max_tokens})"
            )

    def process(self, messages: Sequence[Message], last_usage: Usage | None) -> Sequence[Message]:
        """Outside an agent, with no model to summarise with: the newest messages that
        fit in ``keep_last_tokens`` once the conversation passes ``max_tokens`` (a trim,
        at four characters a token)."""
        memo = TrimMemo()
        if memo.chars_from(messages, 0) * memo.rate(None) <= self.max_tokens:
            return messages
        return messages[_keep_from(messages, 0, self.keep_last_tokens, 0, 0.25) :]


def _usable(summary: Summary, messages: Sequence[Message]) -> bool:
    through = summary.through
    return through < len(messages) and starts_exchange(messages[through])


def _keep_from(
    messages: Sequence[Message], floor: int, budget_tokens: int, fixed_chars: int, rate: float
) -> int:
    """Where the newest whole exchanges that fit in ``budget_tokens`` begin (the newest
    exchange at least); never before ``floor``."""
    starts = [index for index in exchange_starts(messages) if index >= floor]
    if not starts:
        return floor
    kept = starts[-1]
    chars = fixed_chars + sum(message_size(m) for m in messages[kept:])
    for index in reversed(starts[:-1]):
        chars += sum(message_size(m) for m in messages[index:kept])
        if chars * rate > budget_tokens:
            break
        kept = index
    return kept


def _transcript(previous: Summary | None, messages: Sequence[Message]) -> str:
    """The part to summarise, as text: tool calls and results printed as blocks."""
    lines = []
    if previous is not None:
        lines.append(f"[summary of what came before]\n{previous.text}")
    for message in messages:
        for block in message.content:
            kind = block.get("type")
            if kind == "text":
                lines.append(f"[{message.role}] {block.get('text', '')}")
            elif kind == "tool_use":
                lines.append(f"[{message.role} calls {block.get('name')}] {block.get('input')}")
            elif kind == "tool_result":
                error = " (error)" if block.get("is_error") else ""
                lines.append(f"[tool result{error}] {_result_text(block.get('content'))}")
    return "\n\n".join(lines)


def _result_text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) if isinstance(part, Mapping) else str(part)
            for part in content
        )
    return str(content)


class _Quiet:
    """The summary call's listener: its text is not the run's, so nothing streams."""

    wants_deltas = False

    def text(self, delta: str) -> None:
        pass

    def thinking(self, delta: str) -> None:
        pass

    def retry(self, attempt: int, delay: float, reason: str) -> None:
        pass


async def _load(run: Run, state: CompactionState, messages: Sequence[Message]) -> None:
    state.loaded = True
    persistence = run.ctx.persistence
    if persistence is None:
        return
    for summary in reversed(await persistence.store.summaries(persistence.agent_id)):
        if _usable(summary, messages):
            state.summary = summary
            return


async def _summarise(
    run: Run, compaction: Compaction, previous: Summary | None, part: Sequence[Message]
) -> str | None:
    """The summary of ``part`` (after ``previous``), or None when the call failed."""
    ctx = run.ctx
    model_id = compaction.model or ctx.model_id
    request = ModelRequest(
        model=model_id,
        system=compaction.instructions or DEFAULT_INSTRUCTIONS,
        messages=(
            Message(role="user", content=[{"type": "text", "text": _transcript(previous, part)}]),
        ),
        tools=(),
        # Half the room above what is kept: the request after it stays under the limit.
        max_tokens=max(
            64, min(ctx.spec.max_tokens, (compaction.max_tokens - compaction.keep_last_tokens) // 2)
        ),
        cache=None,
    )
    # The summary is a model call like any other: a budget is checked before it (a
    # BudgetExceeded fails the run) and charged its cost after.
    held = (
        await _spending.reserve(run, request, estimate_input_tokens(request))
        if budgeted(ctx.spec.budget)
        else None
    )
    try:
        response = await _ask(run, request, len(part))
    except BaseException:
        if held is not None:
            await _spending.settle(run, held, None)  # the reservation given back
        raise
    if held is not None:
        await _spending.settle(run, held, response.usage if response is not None else None)
    if response is None:
        return None
    text = response.text.strip()
    if not text:
        logger.warning(
            "agent %s: the summary call answered no text; this request is trimmed instead",
            ctx.agent_id,
        )
        return None
    return text


async def _ask(run: Run, request: ModelRequest, messages: int) -> ModelResponse | None:
    """The summary call's response, admitted by the limiter and counted in the run's
    usage; None when it failed (logged)."""
    ctx = run.ctx
    limiter = ctx.limiter
    permit = await limiter.admit(0) if limiter is not None else None
    try:
        response = await ctx.model.respond(request, _Quiet())
    except ModelError as exc:
        logger.warning(
            "agent %s: the summary of %d messages failed (%s); this request is trimmed "
            "instead, and the next one tries again",
            ctx.agent_id,
            messages,
            exc,
        )
        return None
    finally:
        if permit is not None:
            permit.release()
    if permit is not None:
        permit.settle(response.usage)
    run.usage = run.usage + response.usage
    return response


async def compacted(
    run: Run,
    compaction: Compaction,
    tools: tuple[Mapping[str, Any], ...],
    fixed_chars: int,
    rate: float,
) -> Sequence[Message]:
    """The messages to send under ``compaction``, summarising first when the request
    would pass its ``max_tokens``. ``rate`` is the tokens per character of the last
    request (``TrimMemo.rate``); ``tools`` and ``fixed_chars`` what the request carries
    besides its messages, and their size.

    Raises:
        StoreError: the summary could not be stored (the run fails, as for any write).
        ModelError: ``count="api"`` and the count endpoint failed.
    """
    ctx = run.ctx
    conversation = ctx.conversation
    state: CompactionState = conversation.compaction
    memo = conversation.trim
    messages = tuple(conversation.messages)
    if not state.loaded:
        await _load(run, state, messages)
    summary = state.summary
    if summary is not None and not _usable(summary, messages):
        summary = state.summary = None  # the conversation was rewritten under it
    view = _view(state, summary, messages)
    tokens = await _count(run, compaction, tools, view, memo, fixed_chars, rate, summary)
    if tokens <= compaction.max_tokens:
        return view
    floor = summary.through if summary is not None else 0
    keep = _keep_from(messages, floor + 1, compaction.keep_last_tokens, fixed_chars, rate)
    if keep <= floor or not starts_exchange(messages[keep]):
        return view  # the newest exchange alone is too large: nothing to summarise
    text = await _summarise(run, compaction, summary, messages[floor:keep])
    if text is None:
        state.api_tokens = None  # counted before the trim
        trimmed = messages[keep:]
        if summary is not None:
            trimmed = (state.first_message(summary, messages[keep]), *messages[keep + 1 :])
        _sent(memo, trimmed, fixed_chars)
        return trimmed
    made = Summary(
        agent_id=ctx.agent_id,
        through=keep,
        text=text,
        model=compaction.model or ctx.model_id,
        created_at=time.time(),
    )
    persistence = ctx.persistence
    if persistence is not None:
        # The messages it stands for are written first: a summary past the stored end
        # is refused, and a tail written after it would delete it.
        await conversation.flush()
        await persistence.add_summary(made)
    state.summary = made
    view = _view(state, made, messages)
    await _count(run, compaction, tools, view, memo, fixed_chars, rate, made)
    return view


def compacted_view(state: CompactionState, messages: Sequence[Message]) -> Sequence[Message]:
    """The messages as sent under the summary in force (all of them without one)."""
    summary = state.summary
    if summary is None or not _usable(summary, messages):
        return messages
    return _view(state, summary, messages)


def _view(
    state: CompactionState, summary: Summary | None, messages: Sequence[Message]
) -> Sequence[Message]:
    if summary is None:
        return messages
    through = summary.through
    return (state.first_message(summary, messages[through]), *messages[through + 1 :])


def _sent(memo: TrimMemo, view: Sequence[Message], fixed_chars: int) -> None:
    memo.sent_chars = fixed_chars + sum(message_size(m) for m in view)


async def _count(
    run: Run,
    compaction: Compaction,
    tools: tuple[Mapping[str, Any], ...],
    view: Sequence[Message],
    memo: TrimMemo,
    fixed_chars: int,
    rate: float,
    summary: Summary | None,
) -> int:
    """The request's input tokens with ``view`` as its messages (and what the next
    call's rate is calibrated on)."""
    messages = run.ctx.conversation.messages
    if summary is None:
        chars = fixed_chars + memo.chars_from(messages, 0)
    else:
        head = view[0]
        chars = fixed_chars + message_size(head) + memo.chars_from(messages, summary.through + 1)
    memo.sent_chars = chars
    state: CompactionState = run.ctx.conversation.compaction
    state.api_tokens = None
    if compaction.count == "api":
        spec = run.ctx.spec
        request = ModelRequest(
            model=run.ctx.model_id,
            system=spec.system,
            messages=tuple(view),
            tools=tools,
            max_tokens=spec.max_tokens,
            cache=spec.cache,
        )
        counted = await count_input_tokens(run.ctx.model, request)
        if counted is not None:
            state.api_tokens = counted
            return counted
    return math.ceil(chars * rate)

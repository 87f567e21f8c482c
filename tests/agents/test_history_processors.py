"""History processors choose the same messages as their definition says, whatever the
conversation, while walking back only over what they keep; with the memo an agent keeps
per conversation, they cut in steps that keep the cached prefix for many turns, and a
TokenBudget keeps the whole request under its limit."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma import Message, Usage
from satsuma.agents import KeepLastExchanges, TokenBudget
from satsuma.agents._history import TrimMemo, choose, exchange_starts, fixed_size


def _starts(messages: Sequence[Message]) -> list[int]:
    return [
        index
        for index, message in enumerate(messages)
        if message.role == "user"
        and not any(block.get("type") == "tool_result" for block in message.content)
    ]


def _chars(message: Message) -> int:
    return sum(len(str(block)) for block in message.content)


def keep_last_reference(
    count: int, cut_to: float, messages: Sequence[Message]
) -> Sequence[Message]:
    """The definition: all of it up to count exchanges; past that, the last
    floor(count * cut_to) exchanges (one at least)."""
    starts = _starts(messages)
    keep = max(1, math.floor(count * cut_to))
    return messages if len(starts) <= count else messages[starts[-keep] :]


def token_budget_reference(
    budget: int, cut_to: float, messages: Sequence[Message]
) -> Sequence[Message]:
    """The definition, without a memo (four characters a token): all of it if it fits
    the budget; else the longest run of whole exchanges, ending with the newest, that
    fits cut_to of it; the newest exchange always."""
    sizes = [_chars(message) for message in messages]
    if sum(sizes) * 0.25 <= budget:
        return messages
    starts = _starts(messages)
    for start in starts[1:]:
        if sum(sizes[start:]) * 0.25 <= budget * cut_to:
            return messages[start:]
    return messages[starts[-1] :] if starts else messages


def _exchange(draw: st.DrawFn, index: int) -> list[Message]:
    prompt = Message.user("p" * draw(st.integers(0, 300)))
    out = [prompt]
    for turn in range(draw(st.integers(0, 3))):
        call_id = f"toolu_{index}_{turn}"
        out.append(
            Message(
                role="assistant",
                content=[{"type": "tool_use", "id": call_id, "name": "t", "input": {}}],
            )
        )
        out.append(
            Message(
                role="user",
                content=[
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": "r" * draw(st.integers(0, 200)),
                    }
                ],
            )
        )
    if draw(st.booleans()):
        out.append(Message(role="assistant", content=[{"type": "text", "text": "a" * 50}]))
    return out


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    for index in range(draw(st.integers(0, 12))):
        messages += _exchange(draw, index)
    return messages


usages = st.none() | st.builds(Usage, input_tokens=st.integers(0, 5_000))


cut_tos = st.sampled_from([0.1, 0.5, 0.6, 1.0])


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(1, 6), cut_tos)
def test_keep_last_exchanges_keeps_the_last_exchanges_in_steps(
    messages: list[Message], count: int, cut_to: float
) -> None:
    kept = KeepLastExchanges(count, cut_to=cut_to).process(tuple(messages), None)
    assert tuple(kept) == tuple(keep_last_reference(count, cut_to, tuple(messages)))


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(1, 2_000), usages, cut_tos)
def test_token_budget_keeps_the_longest_suffix_that_fits(
    messages: list[Message], budget: int, usage: Usage | None, cut_to: float
) -> None:
    # Alone (no memo), a processor cannot know the size of the last request, so the
    # usage does not calibrate it: four characters a token.
    kept = TokenBudget(budget, cut_to=cut_to).process(tuple(messages), usage)
    assert tuple(kept) == tuple(token_budget_reference(budget, cut_to, tuple(messages)))


class _Counting(Sequence[Message]):
    """A conversation that counts which messages a processor reads."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.read: set[int] = set()

    def __len__(self) -> int:
        return len(self.messages)

    def __getitem__(self, index):  # type: ignore[no-untyped-def,override]
        if isinstance(index, slice):
            self.read.update(range(*index.indices(len(self.messages))))
            return self.messages[index]
        self.read.add(index % len(self.messages))
        return self.messages[index]


def _long_conversation(exchanges: int) -> list[Message]:
    messages: list[Message] = []
    for index in range(exchanges):
        messages.append(Message.user(f"prompt {index} " + "x" * 200))
        messages.append(Message(role="assistant", content=[{"type": "text", "text": "ok"}]))
    return messages


def test_keep_last_exchanges_reads_only_the_end_of_a_long_conversation() -> None:
    for exchanges in (100, 10_000):
        messages = _Counting(_long_conversation(exchanges))
        kept = KeepLastExchanges(3, cut_to=1).process(messages, None)
        assert len(kept) == 6
        # The three exchanges kept and the start of the one before: the same however
        # long the conversation.
        assert len(messages.read) <= 8, (exchanges, len(messages.read))


# --- Steps, with the memo an agent keeps: what the agent loop does --------------------

TOKENS_PER_CHAR = 0.3  # the "API"'s real rate: more than the first guess of 0.25


def _turn(index: int, result_chars: int) -> list[Message]:
    """One exchange: a prompt, a tool call and its result, an answer."""
    call_id = f"toolu_{index}"
    return [
        Message.user(f"question {index}"),
        Message(
            role="assistant",
            content=[{"type": "tool_use", "id": call_id, "name": "t", "input": {}}],
        ),
        Message(
            role="user",
            content=[
                {"type": "tool_result", "tool_use_id": call_id, "content": "r" * result_chars}
            ],
        ),
        Message(role="assistant", content=[{"type": "text", "text": f"answer {index}"}]),
    ]


def _converse(
    processor: TokenBudget | KeepLastExchanges, turns: int, fixed_chars: int
) -> tuple[list[int], list[int]]:
    """Play ``turns`` exchanges as the agent does (a call per user message, the usage of
    each fed to the next): the tokens of each request and where its messages began."""
    memo = TrimMemo()
    history: list[Message] = []
    usage: Usage | None = None
    tokens: list[int] = []
    firsts: list[int] = []
    for index in range(turns):
        for message in _turn(index, 2_000):
            history.append(message)
            if message.role != "user":
                continue
            sent = choose(processor, tuple(history), usage, memo, fixed_chars)
            assert sent[0].role == "user" and not sent[0].tool_results
            assert sent[-1] is history[-1]
            chars = fixed_chars + sum(_chars(m) for m in sent)
            usage = Usage(input_tokens=round(chars * TOKENS_PER_CHAR))
            tokens.append(usage.input_tokens)
            firsts.append(len(history) - len(sent))
    return tokens, firsts


@pytest.mark.parametrize("fixed_chars", [0, 8_000])
def test_token_budget_keeps_every_request_under_its_limit(fixed_chars: int) -> None:
    # The old estimate divided the last trimmed request's tokens by the whole history's
    # characters: it fell further behind as the conversation grew, and requests passed
    # the limit by half. The system prompt and tools count too.
    tokens, _ = _converse(TokenBudget(10_000), 60, fixed_chars)
    # The first calls guess four characters a token; from the second on, calibrated.
    assert max(tokens[1:]) <= 10_000, max(tokens)
    assert max(tokens) > 8_000  # it does use its budget


def test_token_budget_cuts_in_steps_that_keep_the_prefix() -> None:
    tokens, firsts = _converse(TokenBudget(10_000), 100, 0)
    cuts = sum(1 for a, b in itertools.pairwise(firsts) if a != b)
    assert cuts >= 3  # the conversation is long enough to need several
    # Two requests a turn: a cut at most once every 5 turns.
    assert cuts * 5 <= 100, cuts
    # After a cut, the request is near 60 % of the limit, not just under it.
    after = [tokens[i + 1] for i in range(len(firsts) - 1) if firsts[i] != firsts[i + 1]]
    assert max(after) <= 6_000 + 1_000, after


def test_keep_last_exchanges_cuts_in_steps() -> None:
    _, firsts = _converse(KeepLastExchanges(10), 50, 0)
    starts = sorted(set(firsts))
    assert len(starts) > 2
    # Cuts to 6 exchanges, then grows to 10 again: a cut every 5 exchanges.
    assert all(b - a == 5 * 4 for a, b in itertools.pairwise(starts)), starts


def test_the_memo_forgets_a_cut_when_the_history_changed() -> None:
    memo = TrimMemo()
    history = [m for index in range(30) for m in _turn(index, 400)]
    history.append(Message.user("next"))
    budget = TokenBudget(1_000)
    sent = choose(budget, tuple(history), None, memo, 0)
    assert len(sent) < len(history)
    assert memo.start_in(history) == len(history) - len(sent)
    # The same messages, made again (a restart read them from the store): the cut
    # remembered no longer applies, and a fresh one is made.
    reread = [Message(role=m.role, content=m.content) for m in history]
    assert memo.start_in(reread) == 0
    start = budget.cut(tuple(reread), None, memo, 0)
    assert start in exchange_starts(reread) and start > 0


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: TokenBudget(0), "max_tokens"),
        (lambda: TokenBudget(100, cut_to=0), "cut_to"),
        (lambda: TokenBudget(100, cut_to=1.5), "cut_to"),
        (lambda: TokenBudget(100, cut_to=float("nan")), "cut_to"),
        (lambda: KeepLastExchanges(3, cut_to=-0.5), "cut_to"),
        (lambda: KeepLastExchanges(0), "count"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(make: object, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be"):
        make()  # type: ignore[operator]


def test_the_memo_measures_only_new_messages_and_agrees_with_a_full_sum() -> None:
    memo = TrimMemo()
    history: list[Message] = []
    for index in range(20):
        history += _turn(index, 100 + index)
        for start in (0, 4, 0, 8):  # the same start again, then another one
            assert memo.chars_from(history, start) == sum(_chars(m) for m in history[start:])
    counted = _Counting(list(history))
    memo.chars_from(counted, 8)
    counted.messages.append(Message.user("one more"))
    counted.read.clear()
    assert memo.chars_from(counted, 8) == sum(_chars(m) for m in counted.messages[8:])
    assert counted.read <= {len(history) - 1, len(history)}  # the last known, the new one


def test_the_size_of_the_tools_is_measured_once_per_definitions_and_anew_for_others() -> None:
    # A conversation of one run (an open_agent each) takes the size of its class's
    # prepared definitions, measured by the conversation before; other definitions, even
    # as many, are measured themselves.
    tools = [{"name": "a", "description": "x" * 10, "input_schema": {}}]
    first = fixed_size(TrimMemo(), "sys", tools)
    assert first == len("sys") + len(str(tools[0]))
    assert fixed_size(TrimMemo(), None, tools) == first - len("sys")
    other = [{"name": "b", "description": "y" * 99, "input_schema": {}}]
    assert fixed_size(TrimMemo(), None, other) == len(str(other[0]))
    assert fixed_size(TrimMemo(), None, tools) == len(str(tools[0]))

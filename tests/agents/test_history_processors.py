"""History processors choose the same messages as their definition says, whatever the
conversation, while walking back only over what they keep."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma import Message, Usage
from satsuma.agents import KeepLastExchanges, TokenBudget


def _starts(messages: Sequence[Message]) -> list[int]:
    return [
        index
        for index, message in enumerate(messages)
        if message.role == "user"
        and not any(block.get("type") == "tool_result" for block in message.content)
    ]


def _chars(message: Message) -> int:
    return sum(len(str(block)) for block in message.content)


def keep_last_reference(count: int, messages: Sequence[Message]) -> Sequence[Message]:
    """The definition: the messages from the count-th last exchange start on."""
    starts = _starts(messages)
    return messages if len(starts) <= count else messages[starts[-count] :]


def token_budget_reference(
    budget: int, messages: Sequence[Message], last_usage: Usage | None
) -> Sequence[Message]:
    """The definition: the longest run of whole exchanges, ending with the newest, whose
    characters at the previous call's rate fit the budget; the newest exchange always."""
    sizes = [_chars(message) for message in messages]
    total = sum(sizes) or 1
    rate = (
        last_usage.total_input_tokens / total
        if last_usage is not None and last_usage.total_input_tokens > 0
        else 0.25
    )
    if total * rate <= budget:
        return messages
    starts = _starts(messages)
    for start in starts[1:]:
        if sum(sizes[start:]) * rate <= budget:
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


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(1, 6))
def test_keep_last_exchanges_keeps_the_last_count_exchanges(
    messages: list[Message], count: int
) -> None:
    kept = KeepLastExchanges(count).process(tuple(messages), None)
    assert tuple(kept) == tuple(keep_last_reference(count, tuple(messages)))


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(1, 2_000), usages)
def test_token_budget_keeps_the_longest_suffix_that_fits(
    messages: list[Message], budget: int, usage: Usage | None
) -> None:
    kept = TokenBudget(budget).process(tuple(messages), usage)
    assert tuple(kept) == tuple(token_budget_reference(budget, tuple(messages), usage))


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
        kept = KeepLastExchanges(3).process(messages, None)
        assert len(kept) == 6
        # The three exchanges kept and the start of the one before: the same however
        # long the conversation.
        assert len(messages.read) <= 8, (exchanges, len(messages.read))

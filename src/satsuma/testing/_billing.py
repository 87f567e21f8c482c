"""How the loopback Messages API bills a request's input: prompt caching as the API
does it, so that tests and benchmarks see what a conversation costs.

The API reads a request as one sequence of blocks, in this order: each tool definition,
each block of the system prompt, each content block of each message. A block marked
``cache_control`` is a breakpoint: the prefix up to and including it may be written to
the cache, and a later request whose prefix is the same, byte for byte, reads it back.
The rules played here are the API's documented ones:

- At each breakpoint the cache is looked up for the prefix ending there, then for the
  prefixes ending at each of the 20 blocks before it; the longest found is read.
- Everything from the end of what was read up to the last breakpoint is written (each
  breakpoint's prefix becomes an entry), at 5 minutes or, for ``"ttl": "1h"``, an hour;
  an entry read is kept for its time again.
- A prefix shorter than the model's minimum (``min_tokens``) is neither written nor
  read.
- A top-level ``cache_control`` (automatic caching) is a breakpoint on the last block.

Blocks are compared as the JSON the client sent, in its key order and without their
``cache_control``: a client whose prefix changes from one turn to the next (a key order
that moves, a timestamp in the system prompt) misses, as it would on the API. Tokens are
estimated as everywhere in satsuma.testing, a token per 4 characters; the request's
whole input stays that of its body, so a request without breakpoints is billed as it
always was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final, final

import attrs

__all__ = ["InputBill", "PromptCache"]

LOOKBACK: Final = 20
"""Blocks before a breakpoint that the API also looks up."""

_TTLS: Final = {"5m": 300.0, "1h": 3600.0}


@attrs.frozen
class InputBill:
    """A request's input tokens, as the API's usage reports them."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    # Of the tokens written, those written for an hour (the rest for 5 minutes).
    written_for_an_hour: int = 0


@attrs.frozen
class _Block:
    digest: bytes  # of the prefix up to and including this block
    tokens: int  # of the prefix up to and including this block
    ttl: float | None  # a breakpoint's time to live, or None


@final
class PromptCache:
    """The cache of one loopback server (one API account): prefixes by digest, with the
    time each expires, on the clock ``bill`` is given.

    Args:
        min_tokens: The shortest prefix the API caches (1,024 tokens for most Claude
            models; a test may lower it).
    """

    def __init__(self, min_tokens: int = 1024) -> None:
        self.min_tokens = min_tokens
        self._entries: dict[bytes, float] = {}

    @property
    def min_tokens(self) -> int:
        """The shortest prefix cached, in tokens."""
        return self._min_tokens

    @min_tokens.setter
    def min_tokens(self, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"min_tokens must be a positive int, got: {value!r}")
        self._min_tokens = value

    def clear(self) -> None:
        """Forget every entry (as if each had expired)."""
        self._entries.clear()

    def bill(self, payload: Mapping[str, Any], total_tokens: int, now: float) -> InputBill:
        """Bill a request of ``total_tokens`` input tokens at time ``now`` (seconds), and
        keep what it writes. A payload the API would refuse is billed without caching."""
        try:
            blocks = list(_blocks(payload))
        except (TypeError, ValueError, AttributeError):
            return InputBill(total_tokens, 0, 0)
        breakpoints = [i for i, block in enumerate(blocks) if block.ttl is not None]
        if not breakpoints:
            return InputBill(total_tokens, 0, 0)
        for digest in [d for d, expiry in self._entries.items() if expiry <= now]:
            del self._entries[digest]
        read = -1  # the index of the last block read from the cache
        for b in breakpoints:
            for i in range(b, max(-1, b - LOOKBACK - 1), -1):
                if blocks[i].digest in self._entries and blocks[i].tokens >= self.min_tokens:
                    read = max(read, i)
                    break
        read_tokens = blocks[read].tokens if read >= 0 else 0
        if read >= 0:
            # Read: kept for its time again (as long as the breakpoint that found it asks).
            self._entries[blocks[read].digest] = now + _ttl_after(blocks, breakpoints, read)
        written = written_hour = 0
        for b in breakpoints:
            block = blocks[b]
            if b <= read or block.tokens < self.min_tokens:
                continue
            assert block.ttl is not None
            self._entries[block.digest] = now + block.ttl
            if block.ttl > _TTLS["5m"]:
                written_hour = block.tokens - read_tokens
        last = max((b for b in breakpoints if blocks[b].tokens >= self.min_tokens), default=-1)
        if last > read:
            written = blocks[last].tokens - read_tokens
        written_hour = min(written_hour, written)
        input_tokens = max(0, total_tokens - read_tokens - written)
        return InputBill(input_tokens, written, read_tokens, written_hour)


def _ttl_after(blocks: list[_Block], breakpoints: list[int], index: int) -> float:
    """The time to live of the first breakpoint at or after ``index``."""
    for b in breakpoints:
        if b >= index:
            ttl = blocks[b].ttl
            assert ttl is not None
            return ttl
    return _TTLS["5m"]


def _blocks(payload: Mapping[str, Any]) -> Iterator[_Block]:
    """The request's blocks in the API's order, each with its prefix's digest and tokens."""
    digest = hashlib.sha256(json.dumps(payload.get("model"), ensure_ascii=False).encode())
    chars = 0
    pieces = list(_pieces(payload))
    automatic = payload.get("cache_control")
    for index, piece in enumerate(pieces):
        marker = piece.get("cache_control") if isinstance(piece, Mapping) else None
        if marker is None and automatic is not None and index == len(pieces) - 1:
            marker = automatic
        text = json.dumps(_unmarked(piece), ensure_ascii=False)
        chars += len(text)
        digest.update(text.encode("utf-8", "surrogatepass"))
        yield _Block(digest.digest(), chars // 4, _ttl(marker))


def _pieces(payload: Mapping[str, Any]) -> Iterator[Any]:
    yield from payload.get("tools") or ()
    system = payload.get("system")
    if isinstance(system, str):
        yield {"type": "text", "text": system}
    elif system:
        yield from system
    for message in payload["messages"]:
        content = message["content"]
        if isinstance(content, str):
            yield {"role": message["role"], "type": "text", "text": content}
        else:
            for block in content:
                yield {"role": message["role"], **block}


def _unmarked(piece: Any) -> Any:
    if isinstance(piece, Mapping) and "cache_control" in piece:
        return {key: value for key, value in piece.items() if key != "cache_control"}
    return piece


def _ttl(marker: object) -> float | None:
    if not isinstance(marker, Mapping):
        return None
    if marker.get("type") != "ephemeral":
        raise ValueError(f"unknown cache_control type: {marker.get('type')!r}")
    ttl = marker.get("ttl", "5m")
    if ttl not in _TTLS:
        raise ValueError(f"unknown cache_control ttl: {ttl!r}")
    return _TTLS[ttl]

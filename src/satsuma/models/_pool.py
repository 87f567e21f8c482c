"""The connection pool of the shared clients: several small pools instead of one large one.

httpx's pool (httpcore) looks at every one of its connections each time a request starts
or a response is closed: with the SDK's default of up to 1,000 connections, a service
with a thousand conversations in flight spends most of its CPU in that scan (measured:
a 1,000-agent benchmark took 15.8 s in one pool and 8.7 s in 16 pools of 64). So the
shared client's transport is ``SHARDS`` pools of ``PER_SHARD`` connections, as many in
all as the SDK allows, and each request goes to the pool with the fewest requests in
flight (the first one on a tie, so that a quiet service reuses the connections of one
pool). Each pool keeps at most ``KEEP_ALIVE`` idle connections, alive for
``keepalive_expiry`` seconds as the SDK's are; the sockets get the SDK's TCP keep-alive
options, and every pool shares one SSL context (building one costs milliseconds).

A service behind a proxy (``HTTPS_PROXY`` and the like) gets the SDK's own client, which
routes through it; ``pooled_http_client`` returns None then.

Imported with the first shared client, not with satsuma: it imports the SDK.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import AsyncIterator, Callable

import anthropic
import httpx2

__all__ = ["KEEP_ALIVE", "PER_SHARD", "SHARDS", "pooled_http_client"]

SHARDS = 16
PER_SHARD = 64
KEEP_ALIVE = 16
_KEEPALIVE_EXPIRY = 5.0


def _socket_options() -> list[tuple[int, int, int]]:
    # The SDK's: TCP keep-alive probes after a minute idle, so that a connection a NAT or
    # a load balancer dropped silently is found out rather than waited on.
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 60), ("TCP_KEEPCNT", 5)):
        number = getattr(socket, name, None)
        if number is not None:
            options.append((socket.IPPROTO_TCP, number, value))
    return options


def _behind_a_proxy() -> bool:
    return any(scheme != "no" for scheme in urllib.request.getproxies())


def pooled_http_client() -> httpx2.AsyncClient | None:
    """An ``httpx2.AsyncClient`` for ``AsyncAnthropic(http_client=...)`` whose transport
    is the sharded pool, or None when the environment names a proxy (the SDK's own
    client honours it)."""
    if _behind_a_proxy():
        return None
    return anthropic.DefaultAsyncHttpxClient(transport=ShardedTransport())


class ShardedTransport(httpx2.AsyncBaseTransport):
    """``shards`` httpx transports; each request goes to the one with the fewest requests
    in flight (counted from the request's start until its response is closed, or until
    it fails or is cancelled)."""

    def __init__(
        self, shards: int = SHARDS, per_shard: int = PER_SHARD, keep_alive: int = KEEP_ALIVE
    ) -> None:
        context = httpx2.create_ssl_context()
        limits = httpx2.Limits(
            max_connections=per_shard,
            max_keepalive_connections=keep_alive,
            keepalive_expiry=_KEEPALIVE_EXPIRY,
        )
        options = _socket_options()
        self._shards = [
            httpx2.AsyncHTTPTransport(verify=context, limits=limits, socket_options=options)
            for _ in range(shards)
        ]
        self._in_flight = [0] * shards

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Requests in flight per pool."""
        return tuple(self._in_flight)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        counts = self._in_flight
        index = counts.index(min(counts))
        counts[index] += 1

        def release() -> None:
            counts[index] -= 1

        try:
            response = await self._shards[index].handle_async_request(request)
        except BaseException:
            release()
            raise
        stream = response.stream
        if not isinstance(stream, httpx2.AsyncByteStream):  # an async transport's never is
            release()
            return response
        response.stream = _Released(stream, release)
        return response

    async def aclose(self) -> None:
        failure: BaseException | None = None
        for shard in self._shards:
            try:
                await shard.aclose()
            except BaseException as exc:  # every pool is closed; the first failure goes on
                failure = failure or exc
        if failure is not None:
            raise failure


class _Released(httpx2.AsyncByteStream):
    """A response body that gives its pool's slot back when it is closed (once)."""

    def __init__(self, stream: httpx2.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()

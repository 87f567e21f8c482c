"""The ``http_fetch`` tool: GET or HEAD one http(s) URL and read its text body, bounded."""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, ClassVar, Final
from urllib.parse import urljoin, urlsplit

import trio

from .. import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    import httpx2

__all__ = ["HttpFetch"]

_SCHEMES: Final = frozenset({"http", "https"})
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES: Final = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-www-form-urlencoded",
    }
)
# The response headers the model is shown, in this order.
_SHOWN_HEADERS: Final = ("content-type", "content-length", "location", "last-modified")
# How many bytes of a body with no content-type are looked at for NUL bytes.
_SNIFF_BYTES: Final = 1024


class _Refused(Exception):
    """A URL the tool will not fetch; its message is the error the model reads."""


class HttpFetch(Tool):
    """Fetches one http(s) URL with GET or HEAD and returns the status, a few headers and
    the text body.

    Subclass it to change a limit::

        class InternalFetch(HttpFetch):
            allowed_hosts = frozenset({"docs.example.com", "api.example.com"})
            max_bytes = 200_000
            request_timeout = 10.0

    The tool needs the ``network`` capability in the context. Redirects are followed by
    the tool itself, so that the scheme and ``allowed_hosts`` are checked for every hop.
    Proxies, ``.netrc`` and other settings from the environment are not used.
    """

    name = "http_fetch"
    description = (
        "Fetch one http:// or https:// URL with GET (status, headers and body) or HEAD "
        "(status and headers only). Returns the status line, the content-type, "
        "content-length, location and last-modified headers, then the body. Only text "
        "bodies are read (HTML, plain text, JSON, XML, JavaScript); other content types are "
        "refused. Redirects are followed up to a limit (the final URL is then shown); a "
        "long body is cut, with a note saying so; a slow request times out. No request "
        "body, cookies or custom headers can be sent."
    )
    capabilities = frozenset({"network"})
    parameters: ClassVar[Any] = {
        "url": {
            "type": "string",
            "required": True,
            "min_length": 1,
            "description": "The absolute http:// or https:// URL to fetch",
        },
        "method": {
            "type": "string",
            "enum": ["GET", "HEAD"],
            "default": "GET",
            "description": "GET for status, headers and body; HEAD for status and headers",
        },
    }

    request_timeout: ClassVar[float] = 30.0
    """Seconds the whole call may take: every redirect, and the body read."""
    max_bytes: ClassVar[int] = 1_000_000
    """Body bytes read at most; a longer body is cut, with a note saying so."""
    max_redirects: ClassVar[int] = 5
    """Redirects followed at most; one more is an error."""
    allowed_hosts: ClassVar[frozenset[str] | None] = None
    """Host names (lower case, exact) the tool may reach, first URL and every redirect
    alike; None allows any host."""
    user_agent: ClassVar[str] = "satsuma-http-fetch"
    """The ``user-agent`` header sent with each request."""

    async def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult | tuple[str, str]:
        """Fetch ``args["url"]`` with ``args["method"]``.

        Args:
            args: ``url`` and ``method`` (``GET`` or ``HEAD``), checked by the runner.
            ctx: The call's context (unused: the URL is absolute).

        Returns:
            A ToolResult with the status line, headers and body (``is_error`` for a final
            status of 400 or more), or ``("error", reason)`` when no text response was read.
        """
        url = str(args["url"]).strip()
        method = str(args.get("method") or "GET")
        try:
            self._check_url(url)
        except _Refused as refused:
            return "error", str(refused)
        # Imported here: httpx2 takes a fifth of a second to import, and most agents never
        # fetch anything.
        import httpx2

        timeout_text = f"Request timed out after {self.request_timeout:g}s: {url}"
        with trio.move_on_after(self.request_timeout):
            try:
                return await self._fetch(url, method)
            except _Refused as refused:
                return "error", str(refused)
            except httpx2.TimeoutException:
                return "error", timeout_text
            except httpx2.InvalidURL as exc:
                return "error", f"Invalid URL: {url} ({exc})"
            except httpx2.HTTPError as exc:
                return "error", f"Request failed: {_describe(exc)}"
        return "error", timeout_text

    def _check_url(self, url: str) -> None:
        """Raise _Refused unless ``url`` is an absolute http(s) URL to an allowed host."""
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
        except ValueError as exc:
            raise _Refused(f"Invalid URL: {url} ({exc})") from None
        scheme = parts.scheme.lower()
        if not scheme:
            raise _Refused(f"Invalid URL: {url} (no scheme; expected http:// or https://)")
        if scheme not in _SCHEMES:
            raise _Refused(f"URL scheme not allowed: {scheme} (only http and https)")
        host = parts.hostname
        if not host:
            raise _Refused(f"Invalid URL: {url} (no host)")
        if self.allowed_hosts is not None and host.lower() not in self.allowed_hosts:
            raise _Refused(f"Host not allowed: {host.lower()}")

    async def _fetch(self, url: str, method: str) -> ToolResult | tuple[str, str]:
        import httpx2

        async with httpx2.AsyncClient(
            follow_redirects=False,
            timeout=httpx2.Timeout(self.request_timeout),
            trust_env=False,
            headers={"user-agent": self.user_agent, "accept-encoding": "identity"},
        ) as client:
            first_url = url
            redirects: list[str] = []
            while True:
                async with client.stream(method, url) as response:
                    location = response.headers.get("location")
                    if response.status_code in _REDIRECT_STATUSES and location:
                        if len(redirects) >= self.max_redirects:
                            raise _Refused(
                                f"Too many redirects (more than {self.max_redirects}): {first_url}"
                            )
                        target = urljoin(url, location)
                        self._check_url(target)
                        redirects.append(target)
                        url = target
                        continue
                    return await self._read(response, url, method, redirects)

    async def _read(
        self, response: httpx2.Response, url: str, method: str, redirects: list[str]
    ) -> ToolResult | tuple[str, str]:
        headers = response.headers
        content_type = headers.get("content-type")
        media_type = _media_type(content_type)
        body = b""
        cut = False
        if method != "HEAD":
            if media_type is not None and not _is_text(media_type):
                length = headers.get("content-length", "")
                size = f"{int(length):,} bytes" if length.isdigit() else "body"
                return "error", f"Not a text response: content-type {media_type} ({size} not read)"
            read = await self._read_body(response, sniff=media_type is None)
            if read is None:
                return "error", (
                    "Not a text response: no content-type, and the body starts with binary "
                    "data (NUL bytes)"
                )
            body, cut = read
        lines = [f"HTTP {response.status_code} {_reason(response)}"]
        if redirects:
            lines.append(f"url: {url}")
        lines += [f"{name}: {headers[name]}" for name in _SHOWN_HEADERS if name in headers]
        text = "\n".join(lines)
        if method != "HEAD":
            text += "\n\n" + _decode(body, content_type, final=not cut)
            if cut:
                text += f"\n\n[body cut at {self.max_bytes:,} bytes; the response was longer]"
        details = {
            "status": response.status_code,
            "url": url,
            "method": method,
            "redirects": redirects,
            "content_type": content_type,
            "bytes_read": len(body),
            "truncated": cut,
        }
        return ToolResult(text, is_error=response.status_code >= 400, details=details)

    async def _read_body(
        self, response: httpx2.Response, *, sniff: bool
    ) -> tuple[bytes, bool] | None:
        """The body up to ``max_bytes`` and whether it was longer; None if ``sniff`` is set
        and its first bytes hold a NUL (binary data sent with no content-type)."""
        limit = self.max_bytes
        data = bytearray()
        binary = cut = False
        # Stopping early is done by cancelling the read, not by leaving the loop: httpx2
        # does not close the inner async generators of a stream abandoned mid-body (trio
        # then warns when they are garbage collected), while a Cancelled raised at the next
        # network read unwinds and finishes every one of them. Chunks already buffered
        # before that read are dropped.
        with trio.CancelScope() as stop:
            async with contextlib.aclosing(response.aiter_bytes()) as chunks:
                async for chunk in chunks:
                    if binary or cut:
                        continue
                    if sniff and b"\x00" in chunk[: max(_SNIFF_BYTES - len(data), 0)]:
                        binary = True
                        stop.cancel()
                        continue
                    data += chunk
                    # One byte past the limit tells a longer body from one of exactly it.
                    if len(data) > limit:
                        del data[limit:]
                        cut = True
                        stop.cancel()
        if binary:
            return None
        return bytes(data), cut


def _media_type(content_type: str | None) -> str | None:
    if content_type is None:
        return None
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type or None


def _is_text(media_type: str) -> bool:
    return (
        media_type.startswith("text/")
        or media_type in _TEXT_TYPES
        or media_type.endswith(("+json", "+xml"))
    )


def _charset(content_type: str | None) -> str:
    """The charset named by the content-type if Python knows it, else UTF-8."""
    for param in (content_type or "").split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            name = value.strip().strip("\"'")
            try:
                return codecs.lookup(name).name
            except LookupError:
                break
    return "utf-8"


def _decode(body: bytes, content_type: str | None, *, final: bool) -> str:
    """The body as text; a character cut in two by ``max_bytes`` is left out."""
    decoder = codecs.getincrementaldecoder(_charset(content_type))(errors="replace")
    return decoder.decode(body, final=final)


def _reason(response: httpx2.Response) -> str:
    if response.reason_phrase:
        return response.reason_phrase
    try:
        return HTTPStatus(response.status_code).phrase
    except ValueError:
        return ""


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__

"""The http_fetch tool against a loopback server: each kind of response, HEAD, every limit,
the URL checks on the first URL and on redirects, failures, the network capability, and
cancellation."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import quote

import pytest
import trio
import trio.lowlevel

from satsuma.testing import run_tool
from satsuma.tools._results import ToolOutcome
from satsuma.tools.builtin._http import HttpFetch


def _load_server() -> ModuleType:
    # The tests directory is no package (and pytest imports with importlib): load the
    # helper module from its file.
    name = "satsuma_tests_http_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_http_server.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_server = _load_server()
serve = _server.serve


@pytest.fixture
async def server() -> Any:
    async with serve() as running:
        yield running


async def fetch(
    tmp_path: Path,
    url: str,
    method: str | None = None,
    *,
    tool: type[HttpFetch] = HttpFetch,
    capabilities: frozenset[str] = frozenset({"network"}),
    max_result_chars: int | None = 100_000,
) -> ToolOutcome:
    args = {"url": url} if method is None else {"url": url, "method": method}
    context = {"working_dir": tmp_path, "capabilities": capabilities}
    return await run_tool(tool, args, context, max_result_chars=max_result_chars)


def body_of(outcome: ToolOutcome) -> str:
    assert isinstance(outcome.content, str)
    _head, separator, body = outcome.content.partition("\n\n")
    assert separator, outcome.content
    return body


def head_lines(outcome: ToolOutcome) -> list[str]:
    assert isinstance(outcome.content, str)
    return outcome.content.partition("\n\n")[0].splitlines()


def assert_failed(outcome: ToolOutcome, text: str) -> None:
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert outcome.content == f"Error: {text}"


class SmallFetch(HttpFetch):
    max_bytes = 1000


class QuickFetch(HttpFetch):
    request_timeout = 0.5


# --- The declaration -----------------------------------------------------------------------


def test_the_declaration() -> None:
    schema = HttpFetch.schema()
    assert schema["name"] == "http_fetch"
    properties = schema["input_schema"]["properties"]
    assert properties["method"]["enum"] == ["GET", "HEAD"]
    assert schema["input_schema"]["required"] == ["url"]
    assert HttpFetch.capabilities == frozenset({"network"})
    assert (HttpFetch.request_timeout, HttpFetch.max_bytes, HttpFetch.max_redirects) == (
        30.0,
        1_000_000,
        5,
    )
    assert HttpFetch.allowed_hosts is None


async def test_an_invalid_method_is_refused_before_any_request(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/text"), "POST")
    assert outcome.error_kind == "invalid_args"
    assert server.requests == []


# --- Text responses ------------------------------------------------------------------------


async def test_plain_text(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/text"))
    assert not outcome.is_error
    assert outcome.error_kind is None
    body = _server.TEXT_BODY
    assert outcome.content == (
        "HTTP 200 OK\n"
        "content-type: text/plain; charset=utf-8\n"
        f"content-length: {len(body.encode())}\n"
        f"last-modified: {_server.LAST_MODIFIED}\n"
        "\n" + body
    )
    assert outcome.details is not None
    assert outcome.details["status"] == 200
    assert outcome.details["url"] == server.url("/text")
    assert outcome.details["bytes_read"] == len(body.encode())
    assert outcome.details["truncated"] is False
    assert server.requests == [("GET", "/text")]


async def test_html(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/html"))
    assert not outcome.is_error
    assert head_lines(outcome)[:2] == ["HTTP 200 OK", "content-type: text/html; charset=utf-8"]
    assert body_of(outcome) == _server.HTML_BODY


async def test_json(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/json"))
    assert not outcome.is_error
    assert "content-type: application/json" in head_lines(outcome)
    assert body_of(outcome) == _server.JSON_BODY


async def test_the_charset_of_the_content_type_decodes_the_body(
    tmp_path: Path, server: Any
) -> None:
    outcome = await fetch(tmp_path, server.url("/latin1"))
    assert not outcome.is_error
    assert body_of(outcome) == _server.LATIN1_TEXT


async def test_no_content_type_with_text_is_read(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/no-type-text"))
    assert not outcome.is_error
    assert not any(line.startswith("content-type") for line in head_lines(outcome))
    assert body_of(outcome) == _server.NO_TYPE_TEXT


@pytest.mark.parametrize(
    "media_type",
    [
        "text/csv",
        "application/xml",
        "application/javascript",
        "application/x-www-form-urlencoded",
        "application/ld+json",
        "image/svg+xml",
        "TEXT/PLAIN; charset=UTF-8",
    ],
)
def test_text_media_types(media_type: str) -> None:
    from satsuma.tools.builtin._http import _is_text, _media_type

    parsed = _media_type(media_type)
    assert parsed is not None and _is_text(parsed)


@pytest.mark.parametrize(
    "media_type", ["image/png", "application/octet-stream", "application/pdf", "video/mp4"]
)
def test_binary_media_types(media_type: str) -> None:
    from satsuma.tools.builtin._http import _is_text

    assert not _is_text(media_type)


def test_an_unknown_charset_falls_back_to_utf8() -> None:
    from satsuma.tools.builtin._http import _decode

    assert _decode("é".encode(), "text/plain; charset=no-such-codec", final=True) == "é"
    assert _decode(b"caf\xe9", "text/plain", final=True) == "caf\ufffd"
    assert _decode(b"caf\xe9", 'text/plain; charset="ISO-8859-1"', final=True) == "café"


# --- Binary responses -----------------------------------------------------------------------


async def test_a_binary_content_type_is_refused_without_reading(
    tmp_path: Path, server: Any
) -> None:
    outcome = await fetch(tmp_path, server.url("/binary"))
    size = len(_server.PNG_BYTES)
    assert_failed(outcome, f"Not a text response: content-type image/png ({size:,} bytes not read)")


async def test_binary_data_with_no_content_type_is_refused(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/no-type-binary"))
    assert outcome.error_kind == "failed"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Not a text response: no content-type")
    assert "NUL" in outcome.content


# --- Error statuses -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status_line"),
    [("/404", "HTTP 404 Not Found"), ("/500", "HTTP 500 Internal Server Error")],
)
async def test_an_error_status_shows_the_page_as_an_error(
    tmp_path: Path, server: Any, path: str, status_line: str
) -> None:
    outcome = await fetch(tmp_path, server.url(path))
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert head_lines(outcome)[0] == status_line
    assert body_of(outcome)  # the model sees the page
    assert not outcome.text.startswith("Error:")
    assert outcome.details is not None
    assert outcome.details["status"] == int(status_line.split()[1])


# --- HEAD -----------------------------------------------------------------------------------


async def test_head_returns_the_headers_only(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/text"), "HEAD")
    assert not outcome.is_error
    assert outcome.content == (
        "HTTP 200 OK\n"
        "content-type: text/plain; charset=utf-8\n"
        f"content-length: {len(_server.TEXT_BODY.encode())}\n"
        f"last-modified: {_server.LAST_MODIFIED}"
    )
    assert server.requests == [("HEAD", "/text")]


async def test_head_of_a_binary_or_huge_resource_is_fine(tmp_path: Path, server: Any) -> None:
    binary = await fetch(tmp_path, server.url("/binary"), "HEAD")
    assert not binary.is_error
    assert "content-type: image/png" in head_lines(binary)
    big = await fetch(tmp_path, server.url("/big"), "HEAD")
    assert big.content == (
        f"HTTP 200 OK\ncontent-type: text/plain\ncontent-length: {_server.BIG_SIZE}"
    )


async def test_head_of_an_error_status(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/404"), "HEAD")
    assert outcome.is_error
    assert outcome.text.startswith("HTTP 404 Not Found\n")


async def test_head_follows_redirects_with_head(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/redirect?to=/json"), "HEAD")
    assert not outcome.is_error
    assert head_lines(outcome)[0] == "HTTP 200 OK"
    assert server.requests == [("HEAD", "/redirect?to=/json"), ("HEAD", "/json")]


# --- max_bytes ------------------------------------------------------------------------------


async def test_a_big_body_is_cut_at_max_bytes(tmp_path: Path, server: Any) -> None:
    # The runner would cut a megabyte for the model to its own max_result_chars.
    outcome = await fetch(tmp_path, server.url("/big"), max_result_chars=None)
    assert not outcome.is_error
    body = body_of(outcome)
    assert body.endswith("\n\n[body cut at 1,000,000 bytes; the response was longer]")
    text = body.removesuffix("\n\n[body cut at 1,000,000 bytes; the response was longer]")
    assert len(text) == 1_000_000
    assert text.startswith("0123456789abcdefghijklmnopqrstuvwxyz\n")
    assert outcome.details is not None
    assert outcome.details["bytes_read"] == 1_000_000
    assert outcome.details["truncated"] is True


async def test_the_cut_marker_survives_the_runners_own_truncation(
    tmp_path: Path, server: Any
) -> None:
    outcome = await fetch(tmp_path, server.url("/big"))  # max_result_chars=100_000
    assert outcome.text.startswith("HTTP 200 OK\ncontent-type: text/plain\n")
    assert outcome.text.endswith("\n\n[body cut at 1,000,000 bytes; the response was longer]")
    assert outcome.details is not None
    assert outcome.details["bytes_read"] == 1_000_000


async def test_an_endless_body_stops_at_max_bytes(tmp_path: Path, server: Any) -> None:
    with trio.fail_after(10):
        outcome = await fetch(tmp_path, server.url("/endless"), tool=SmallFetch)
    assert not outcome.is_error
    body = body_of(outcome)
    assert body.endswith("\n\n[body cut at 1,000 bytes; the response was longer]")
    assert len(body.partition("\n\n[body cut")[0]) == 1000
    # The client hung up: the server's endless send ended.
    await server.wait_idle()


async def test_a_body_of_exactly_max_bytes_is_not_cut(tmp_path: Path, server: Any) -> None:
    class Exact(HttpFetch):
        max_bytes = len(_server.TEXT_BODY.encode())

    outcome = await fetch(tmp_path, server.url("/text"), tool=Exact)
    assert body_of(outcome) == _server.TEXT_BODY
    assert outcome.details is not None and outcome.details["truncated"] is False


async def test_a_cut_never_splits_a_character(tmp_path: Path, server: Any) -> None:
    encoded = _server.TEXT_BODY.encode()
    cut_inside = encoded.index("ö".encode()) + 1  # between the two bytes of ö

    class Tiny(HttpFetch):
        max_bytes = cut_inside

    outcome = await fetch(tmp_path, server.url("/text"), tool=Tiny)
    assert body_of(outcome) == (
        "Hello, w\n\n[body cut at " + f"{cut_inside}" + " bytes; the response was longer]"
    )


async def test_a_binary_body_with_no_content_type_is_sniffed_within_max_bytes(
    tmp_path: Path, server: Any
) -> None:
    class Two(HttpFetch):
        max_bytes = 2

    # The NUL bytes of /no-type-binary come first: refused even with a tiny limit.
    outcome = await fetch(tmp_path, server.url("/no-type-binary"), tool=Two)
    assert outcome.error_kind == "failed"
    text = await fetch(tmp_path, server.url("/no-type-text"), tool=Two)
    assert body_of(text).startswith("pl\n\n[body cut at 2 bytes")


# --- Redirects ------------------------------------------------------------------------------


async def test_a_redirect_is_followed(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/redirect?to=/text"))
    assert not outcome.is_error
    lines = head_lines(outcome)
    assert lines[:2] == ["HTTP 200 OK", f"url: {server.url('/text')}"]
    assert body_of(outcome) == _server.TEXT_BODY
    assert outcome.details is not None
    assert outcome.details["url"] == server.url("/text")
    assert outcome.details["redirects"] == [server.url("/text")]
    assert server.requests == [("GET", "/redirect?to=/text"), ("GET", "/text")]


async def test_an_absolute_redirect_is_followed(tmp_path: Path, server: Any) -> None:
    target = quote(server.url("/json"), safe="")
    outcome = await fetch(tmp_path, server.url(f"/redirect?to={target}"))
    assert body_of(outcome) == _server.JSON_BODY


async def test_max_redirects_are_followed(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/hops/5"))
    assert not outcome.is_error
    assert body_of(outcome) == "arrived\n"
    assert len(server.requests) == 6


async def test_one_redirect_too_many(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/hops/6"))
    assert_failed(outcome, f"Too many redirects (more than 5): {server.url('/hops/6')}")
    assert len(server.requests) == 6  # /hops/0 was never asked for


async def test_a_redirect_loop(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/redirect-loop"))
    assert_failed(outcome, f"Too many redirects (more than 5): {server.url('/redirect-loop')}")
    assert server.requests == [("GET", "/redirect-loop")] * 6


async def test_max_redirects_can_be_changed(tmp_path: Path, server: Any) -> None:
    class NoRedirects(HttpFetch):
        max_redirects = 0

    outcome = await fetch(tmp_path, server.url("/redirect?to=/text"), tool=NoRedirects)
    assert_failed(outcome, f"Too many redirects (more than 0): {server.url('/redirect?to=/text')}")


@pytest.mark.parametrize(
    ("location", "scheme"),
    [("ftp://127.0.0.1/file", "ftp"), ("file:///etc/passwd", "file"), ("gopher://x/", "gopher")],
)
async def test_a_redirect_to_a_disallowed_scheme(
    tmp_path: Path, server: Any, location: str, scheme: str
) -> None:
    outcome = await fetch(tmp_path, server.url(f"/redirect?to={quote(location, safe='')}"))
    assert_failed(outcome, f"URL scheme not allowed: {scheme} (only http and https)")
    assert len(server.requests) == 1


# --- URL checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("ftp://127.0.0.1/file", "ftp"),
        ("file:///etc/passwd", "file"),
        ("javascript:alert(1)", "javascript"),
        ("data:text/plain,hello", "data"),
        ("FTP://example.com/", "ftp"),
    ],
)
async def test_other_schemes_are_refused(tmp_path: Path, url: str, scheme: str) -> None:
    outcome = await fetch(tmp_path, url)
    assert_failed(outcome, f"URL scheme not allowed: {scheme} (only http and https)")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("example.com/page", "no scheme"),
        ("/just/a/path", "no scheme"),
        ("http:///no-host", "no host"),
        ("https://", "no host"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999/", "out of range"),
    ],
)
async def test_a_url_that_is_not_usable_is_named(tmp_path: Path, url: str, problem: str) -> None:
    outcome = await fetch(tmp_path, url)
    assert outcome.error_kind == "failed"
    assert outcome.text.startswith(f"Error: Invalid URL: {url} (")
    assert problem in outcome.text


async def test_an_empty_url_is_invalid_args(tmp_path: Path) -> None:
    outcome = await fetch(tmp_path, "")
    assert outcome.error_kind == "invalid_args"


# --- allowed_hosts --------------------------------------------------------------------------


class LoopbackOnly(HttpFetch):
    allowed_hosts = frozenset({"127.0.0.1"})


class LocalhostOnly(HttpFetch):
    allowed_hosts = frozenset({"localhost"})


async def test_an_allowed_host(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/text"), tool=LoopbackOnly)
    assert not outcome.is_error
    assert body_of(outcome) == _server.TEXT_BODY


async def test_a_host_not_allowed_is_refused_before_any_request(
    tmp_path: Path, server: Any
) -> None:
    outcome = await fetch(tmp_path, server.url("/text"), tool=LocalhostOnly)
    assert_failed(outcome, "Host not allowed: 127.0.0.1")
    assert server.requests == []


async def test_host_names_are_compared_in_lower_case(tmp_path: Path) -> None:
    outcome = await fetch(tmp_path, "http://EXAMPLE.com/", tool=LocalhostOnly)
    assert_failed(outcome, "Host not allowed: example.com")


async def test_a_redirect_to_a_host_not_allowed_is_refused(tmp_path: Path, server: Any) -> None:
    elsewhere = quote(f"http://localhost:{server.port}/text", safe="")
    outcome = await fetch(tmp_path, server.url(f"/redirect?to={elsewhere}"), tool=LoopbackOnly)
    assert_failed(outcome, "Host not allowed: localhost")
    assert server.requests == [("GET", f"/redirect?to={elsewhere}")]


# --- Failures and timeouts ------------------------------------------------------------------


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_refused_connection(tmp_path: Path) -> None:
    outcome = await fetch(tmp_path, f"http://127.0.0.1:{_unused_port()}/")
    assert outcome.error_kind == "failed"
    assert outcome.text.startswith("Error: Request failed: ConnectError")


async def test_a_host_that_does_not_resolve(tmp_path: Path) -> None:
    # .invalid never resolves (RFC 2606); the suite's guard blocks any real connection.
    outcome = await fetch(tmp_path, "http://no-such-host.invalid/")
    assert outcome.error_kind == "failed"
    assert outcome.text.startswith("Error: Request failed: ")


async def test_a_server_that_sends_headers_then_stalls(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/slow"), tool=QuickFetch)
    assert_failed(outcome, f"Request timed out after 0.5s: {server.url('/slow')}")
    await server.wait_idle()  # the client hung up


async def test_a_server_that_never_answers(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/hang"), tool=QuickFetch)
    assert_failed(outcome, f"Request timed out after 0.5s: {server.url('/hang')}")
    await server.wait_idle()


async def test_request_timeout_bounds_the_whole_call(tmp_path: Path, server: Any) -> None:
    # Each hop is quick; the endless body is not: the timeout covers the body read too.
    class Patient(QuickFetch):
        max_bytes = 10**12

    outcome = await fetch(tmp_path, server.url("/redirect?to=/endless"), tool=Patient)
    assert_failed(outcome, f"Request timed out after 0.5s: {server.url('/redirect?to=/endless')}")
    await server.wait_idle()


# --- The network capability -----------------------------------------------------------------


async def test_without_the_network_capability_nothing_is_sent(tmp_path: Path, server: Any) -> None:
    outcome = await fetch(tmp_path, server.url("/text"), capabilities=frozenset({"read"}))
    assert outcome.is_error
    assert outcome.error_kind == "denied"
    assert outcome.content == "Error: Tool capability denied: network"
    assert server.requests == []


# --- Cancellation ---------------------------------------------------------------------------


def _all_tasks() -> set[trio.lowlevel.Task]:
    tasks: set[trio.lowlevel.Task] = set()
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        if task is None:
            continue
        tasks.add(task)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return tasks


async def test_cancelling_the_call_closes_the_connection(tmp_path: Path, server: Any) -> None:
    # A warm-up call, so that any task started once per run already exists.
    await fetch(tmp_path, server.url("/text"))
    await server.wait_idle()
    before = _all_tasks()
    with trio.move_on_after(0.3) as scope:
        await fetch(tmp_path, server.url("/hang"))
    assert scope.cancelled_caught
    assert ("GET", "/hang") in server.requests
    await server.wait_idle()  # the client's socket was closed
    assert _all_tasks() == before

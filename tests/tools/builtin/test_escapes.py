"""The escape suite: no path, symlink or race takes a file tool outside its workspace.

The tree built by ``make_tree`` under a temporary directory::

    secret.txt            "TOP-SECRET"        (next to the workspace)
    sécret-ü.txt          "TOP-SECRET"
    outside/secret.txt    "TOP-SECRET"
    outside/sub/
    ws2/secret.txt        "TOP-SECRET"        (a sibling whose name starts with the root's)
    ws/                   the workspace root
        file.txt, sub/inner.txt, sub/deeper/, ünïcødé/ü.txt, target.txt
        link_to_secret -> ../secret.txt       abs_secret -> <tmp>/secret.txt
        link1 -> link2 -> ../secret.txt       (a chain)
        outdir -> ../outside                  abs_outside -> <tmp>/outside
        inlink -> sub                         (inside: allowed)
        inside_abs -> <tmp>/ws/file.txt       (absolute, inside: allowed)
        link_to_root -> /                     link_to_etc -> /etc
        loop_a -> loop_b -> loop_a            self_loop -> self_loop
        sub/back -> ../../ws/file.txt         (climbs above the root and back: refused)
        sub/up -> ..                          (the root: allowed)
        sub/upup -> ../..                     (refused)
        to_ws2 -> ../ws2                      to_ws2_abs -> <tmp>/ws2
        dangling_out -> ../outside/created.txt
        dangling_abs -> <tmp>/outside/created2.txt
        flip                                  (the race tests' directory/symlink)
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satsuma.testing import run_tool
from satsuma.tools.builtin import _sandbox
from satsuma.tools.builtin._files import EditFile, ListDir, ReadFile, WriteFile

SECRET = "TOP-SECRET"
CAPS = {"read", "write"}
ESCAPES = "Error: Path escapes workspace root"

Snapshot = dict[str, tuple[int, int, int, bytes | str | None]]


def make_tree(base: Path) -> Path:
    """Build the tree described in the module docstring under ``base``; return ``ws``."""
    (base / "secret.txt").write_text(SECRET)
    (base / "sécret-ü.txt").write_text(SECRET)
    (base / "outside" / "sub").mkdir(parents=True)
    (base / "outside" / "secret.txt").write_text(SECRET)
    (base / "ws2").mkdir()
    (base / "ws2" / "secret.txt").write_text(SECRET)
    ws = base / "ws"
    (ws / "sub" / "deeper").mkdir(parents=True)
    (ws / "ünïcødé").mkdir()
    (ws / "ünïcødé" / "ü.txt").write_text("unicode inside\n")
    (ws / "file.txt").write_text("hello\n")
    (ws / "target.txt").write_text("target\n")
    (ws / "sub" / "inner.txt").write_text("inner\n")
    links = {
        "link_to_secret": "../secret.txt",
        "abs_secret": str(base / "secret.txt"),
        "link1": "link2",
        "link2": "../secret.txt",
        "outdir": "../outside",
        "abs_outside": str(base / "outside"),
        "inlink": "sub",
        "inside_abs": str(ws / "file.txt"),
        "link_to_root": "/",
        "link_to_etc": "/etc",
        "loop_a": "loop_b",
        "loop_b": "loop_a",
        "self_loop": "self_loop",
        "sub/back": "../../ws/file.txt",
        "sub/up": "..",
        "sub/upup": "../..",
        "to_ws2": "../ws2",
        "to_ws2_abs": str(base / "ws2"),
        "dangling_out": "../outside/created.txt",
        "dangling_abs": str(base / "outside" / "created2.txt"),
    }
    for name, target in links.items():
        os.symlink(target, ws / name)
    return ws


def snapshot_outside(base: Path, ws: Path) -> Snapshot:
    """Every entry under ``base`` but not under ``ws``: type, size, mtime, content."""
    result: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        if Path(dirpath) == base and ws.name in dirnames:
            dirnames.remove(ws.name)
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = os.lstat(path)
            content: bytes | str | None = None
            if path.is_symlink():
                content = os.readlink(path)
            elif path.is_file():
                content = path.read_bytes()
            result[str(path.relative_to(base))] = (
                info.st_mode,
                info.st_size,
                info.st_mtime_ns,
                content,
            )
    return result


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path, make_tree(tmp_path)


def context(ws: Path) -> dict[str, Any]:
    return {"working_dir": ws, "capabilities": CAPS}


# ------------------------------------------------------------------ the escape attempts

# (id, path template); {tmp} is the directory holding ws, {ws} the root itself. Each is
# refused with "Error: Path escapes workspace root: <path as given>" by every tool.
ESCAPE_PATHS: list[tuple[str, str]] = [
    ("dotdot", ".."),
    ("dotdot-slash", "../"),
    ("parent-secret", "../secret.txt"),
    ("dot-parent-secret", "./../secret.txt"),
    ("sub-up-up", "sub/../../secret.txt"),
    ("sub-double-slash-up", "sub/..//../secret.txt"),
    ("deep-up", "sub/deeper/../../../secret.txt"),
    ("parent-back-in", "../ws/file.txt"),
    ("parent-ws2", "../ws2/secret.txt"),
    ("parent-outside-new", "../outside/new.txt"),
    ("parent-unicode", "../sécret-ü.txt"),
    ("unicode-dir-up", "ünïcødé/../../secret.txt"),
    ("long-dotdot-chain", "../" * 300 + "etc/passwd"),
    ("long-dotdot-after-sub", "sub/" + "../" * 50 + "secret.txt"),
    ("abs-etc-passwd", "/etc/passwd"),
    ("abs-double-slash", "//etc/passwd"),
    ("abs-triple-slash", "///etc/passwd"),
    ("abs-root", "/"),
    ("abs-tmp-secret", "{tmp}/secret.txt"),
    ("abs-tmp", "{tmp}"),
    ("abs-outside-trailing", "{tmp}/outside/"),
    ("abs-ws2-prefix-sibling", "{tmp}/ws2/secret.txt"),
    ("abs-ws2-dir", "{tmp}/ws2"),
    ("abs-ws-concat-2", "{ws}2/secret.txt"),
    ("abs-ws-dotdot-ws2", "{ws}/../ws2/secret.txt"),
    ("abs-ws-dotdot-secret", "{ws}/../secret.txt"),
    ("abs-ws-sub-up-up", "{ws}/sub/../../secret.txt"),
    ("abs-ws-dotdot-ws", "{ws}/../ws/file.txt"),
    ("link-to-secret", "link_to_secret"),
    ("link-to-secret-trailing", "link_to_secret/"),
    ("abs-link-to-secret", "abs_secret"),
    ("chain", "link1"),
    ("chain-middle", "link2"),
    ("outdir", "outdir"),
    ("outdir-trailing", "outdir/"),
    ("outdir-secret", "outdir/secret.txt"),
    ("outdir-new", "outdir/new.txt"),
    ("outdir-deep-new", "outdir/sub/new/deep.txt"),
    ("abs-outside-secret", "abs_outside/secret.txt"),
    ("abs-outside-new", "abs_outside/new.txt"),
    ("root-etc-passwd", "link_to_root/etc/passwd"),
    ("root-link", "link_to_root"),
    ("root-tmp-secret", "link_to_root{tmp}/secret.txt"),
    ("etc-passwd", "link_to_etc/passwd"),
    ("sub-back", "sub/back"),
    ("sub-upup-secret", "sub/upup/secret.txt"),
    ("sub-up-dotdot", "sub/up/../secret.txt"),
    ("inlink-up-up", "inlink/../../secret.txt"),
    ("to-ws2", "to_ws2/secret.txt"),
    ("to-ws2-abs", "to_ws2_abs/secret.txt"),
    ("dangling-out", "dangling_out"),
    ("dangling-abs", "dangling_abs"),
    ("ws-via-abs-outside", "abs_outside/../ws/file.txt"),
]

# Refused with another clear error (error_kind "failed", never a crash).
OTHER_ERRORS: list[tuple[str, str, str]] = [
    ("loop", "loop_a", "Error: Too many levels of symbolic links: loop_a"),
    ("loop-dir", "loop_a/x", "Error: Too many levels of symbolic links: loop_a/x"),
    ("self-loop", "self_loop", "Error: Too many levels of symbolic links: self_loop"),
    ("nul-middle", "file\x00.txt", "Error: Invalid path (it contains a NUL character)"),
    ("nul-escape", "../secret.txt\x00", "Error: Invalid path (it contains a NUL character)"),
    ("nul-only", "\x00", "Error: Invalid path (it contains a NUL character)"),
    ("name-too-long", "x" * 300, "Error: Cannot reach"),
    ("dir-too-long-up", "x" * 300 + "/../../secret.txt", "Error: "),
]

TOOLS: dict[str, tuple[type[Any], Callable[[str], dict[str, Any]]]] = {
    "read_file": (ReadFile, lambda p: {"path": p}),
    "list_dir": (ListDir, lambda p: {"path": p}),
    "write_file": (WriteFile, lambda p: {"path": p, "content": f"PWNED {SECRET[:3]}"}),
    "edit_file": (EditFile, lambda p: {"path": p, "old": SECRET, "new": "PWNED"}),
}


def fill(template: str, base: Path, ws: Path) -> str:
    return template.replace("{tmp}", str(base)).replace("{ws}", str(ws))


async def attempt(base: Path, ws: Path, tool_name: str, path: str) -> Any:
    tool, make_args = TOOLS[tool_name]
    before = snapshot_outside(base, ws)
    outcome = await run_tool(tool, make_args(path), context(ws))
    assert outcome.is_error, outcome.content
    assert outcome.error_kind == "failed", outcome.content
    assert SECRET not in outcome.content
    assert snapshot_outside(base, ws) == before
    for created in ("new.txt", "created.txt", "created2.txt", "sub/new"):
        assert not (base / "outside" / created).exists()
    assert (base / "secret.txt").read_text() == SECRET
    assert (base / "outside" / "secret.txt").read_text() == SECRET
    return outcome


@pytest.mark.parametrize("tool_name", list(TOOLS))
@pytest.mark.parametrize(
    ("template"), [p for _, p in ESCAPE_PATHS], ids=[i for i, _ in ESCAPE_PATHS]
)
async def test_escape_refused(tree: tuple[Path, Path], template: str, tool_name: str) -> None:
    base, ws = tree
    path = fill(template, base, ws)
    outcome = await attempt(base, ws, tool_name, path)
    assert outcome.content == f"{ESCAPES}: {path}"


@pytest.mark.parametrize("tool_name", list(TOOLS))
@pytest.mark.parametrize(
    ("template", "prefix"),
    [(p, e) for _, p, e in OTHER_ERRORS],
    ids=[i for i, _, _ in OTHER_ERRORS],
)
async def test_other_bad_paths_fail_cleanly(
    tree: tuple[Path, Path], template: str, prefix: str, tool_name: str
) -> None:
    base, ws = tree
    outcome = await attempt(base, ws, tool_name, fill(template, base, ws))
    assert outcome.content.startswith(prefix)


@pytest.mark.parametrize("tool_name", ["read_file", "list_dir", "edit_file"])
async def test_missing_dir_then_up_is_not_found(tree: tuple[Path, Path], tool_name: str) -> None:
    # Components are walked for real: a missing "a" stops the walk before the "..".
    base, ws = tree
    outcome = await attempt(base, ws, tool_name, "a/../../secret.txt")
    assert outcome.content == ("Error: No such directory: a (on the way to a/../../secret.txt)")


async def test_write_missing_dir_then_up_is_refused(tree: tuple[Path, Path]) -> None:
    base, ws = tree
    outcome = await attempt(base, ws, "write_file", "a/../../secret.txt")
    assert outcome.content == f"{ESCAPES}: a/../../secret.txt"


async def test_refused_write_leaves_no_directories(tree: tuple[Path, Path]) -> None:
    base, ws = tree
    before = sorted(os.listdir(ws))
    outcome = await attempt(base, ws, "write_file", "a/b/../../../secret.txt")
    assert outcome.content.startswith(ESCAPES)
    assert sorted(os.listdir(ws)) == before


async def test_dangling_link_out_is_not_created(tree: tuple[Path, Path]) -> None:
    base, ws = tree
    for name in ("dangling_out", "dangling_abs"):
        outcome = await attempt(base, ws, "write_file", name)
        assert outcome.content == f"{ESCAPES}: {name}"
        assert os.path.islink(ws / name)
    assert sorted(os.listdir(base / "outside")) == ["secret.txt", "sub"]


async def test_link_to_secret_stays_a_link_after_refused_write(tree: tuple[Path, Path]) -> None:
    base, ws = tree
    await attempt(base, ws, "write_file", "link_to_secret")
    assert os.readlink(ws / "link_to_secret") == "../secret.txt"


# ------------------------------------------------------------------ allowed cases


ALLOWED_READS: list[tuple[str, str, str]] = [
    ("abs-inside", "{ws}/file.txt", "hello"),
    ("abs-inside-dot", "{ws}/./file.txt", "hello"),
    ("abs-inside-double-slash", "{ws}//sub//inner.txt", "inner"),
    ("abs-inside-sub-up", "{ws}/sub/../file.txt", "hello"),
    ("sub-up", "sub/../file.txt", "hello"),
    ("dot-prefix", "./file.txt", "hello"),
    ("inlink", "inlink/inner.txt", "inner"),
    ("inlink-up", "inlink/../file.txt", "hello"),
    ("inside-abs-link", "inside_abs", "hello"),
    ("sub-up-link", "sub/up/file.txt", "hello"),
    ("sub-up-link-sub", "sub/up/sub/up/inlink/inner.txt", "inner"),
    ("unicode", "ünïcødé/ü.txt", "unicode inside"),
    ("trailing-slash-file", "file.txt/", "hello"),
]


@pytest.mark.parametrize(
    ("template", "line"),
    [(p, t) for _, p, t in ALLOWED_READS],
    ids=[i for i, _, _ in ALLOWED_READS],
)
async def test_allowed_read(tree: tuple[Path, Path], template: str, line: str) -> None:
    base, ws = tree
    outcome = await run_tool(ReadFile, {"path": fill(template, base, ws)}, context(ws))
    assert not outcome.is_error, outcome.content
    assert outcome.content == f"     1\t{line}"


async def test_allowed_list_through_inside_links(tree: tuple[Path, Path]) -> None:
    ws = tree[1]
    for path in ("inlink", "sub/up/sub", f"{ws}/inlink", "inlink/"):
        outcome = await run_tool(ListDir, {"path": path}, context(ws))
        assert outcome.content == "\n".join(
            [
                "[link] back -> ../../ws/file.txt",
                "[dir] deeper/",
                "[file] inner.txt (6 bytes)",
                "[link] up -> ..",
                "[link] upup -> ../..",
            ]
        ), path
    root = await run_tool(ListDir, {"path": "sub/up"}, context(ws))
    assert "[link] link_to_secret -> ../secret.txt" in root.content


async def test_allowed_writes_and_edits(tree: tuple[Path, Path]) -> None:
    base, ws = tree
    before = snapshot_outside(base, ws)
    ctx = context(ws)
    assert (await run_tool(WriteFile, {"path": "inlink/new.txt", "content": "n"}, ctx)).content == (
        "Created sub/new.txt (1 bytes)"
    )
    assert (ws / "sub" / "new.txt").read_text() == "n"
    outcome = await run_tool(WriteFile, {"path": f"{ws}/sub/../abs.txt", "content": "a"}, ctx)
    assert outcome.content == "Created abs.txt (1 bytes)"
    outcome = await run_tool(WriteFile, {"path": "inside_abs", "content": "via link\n"}, ctx)
    assert outcome.content == "Replaced file.txt (9 bytes)"
    assert (ws / "file.txt").read_text() == "via link\n"
    assert os.path.islink(ws / "inside_abs")
    outcome = await run_tool(
        EditFile, {"path": "sub/up/inlink/inner.txt", "old": "inner", "new": "edited"}, ctx
    )
    assert outcome.content == "Edited sub/inner.txt: replaced 1 occurrence at line 1"
    assert snapshot_outside(base, ws) == before


# ------------------------------------------------------------------ swaps between check and use


class _SwapAfterLstat:
    """Wraps ``os.stat``: the sandbox's first no-follow stat of ``name`` sees the old entry,
    then ``swap`` runs before the sandbox acts on what it saw."""

    def __init__(self, name: str, swap: Callable[[], None]) -> None:
        self.real = os.stat
        self.name = name
        self.swap = swap
        self.done = False

    def __call__(self, path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = self.real(path, *args, **kwargs)
        if (
            not self.done
            and path == self.name
            and kwargs.get("follow_symlinks") is False
            and kwargs.get("dir_fd") is not None
        ):
            self.done = True
            self.swap()
        return result


def _dir_to_link(ws: Path, target: str) -> Callable[[], None]:
    def swap() -> None:
        os.rename(ws / "swap", ws / "swap.old")
        os.symlink(target, ws / "swap")

    return swap


def _link_to_dir(ws: Path) -> Callable[[], None]:
    def swap() -> None:
        os.unlink(ws / "swap")
        (ws / "swap").mkdir()
        (ws / "swap" / "secret.txt").write_text("harmless\n")

    return swap


async def test_dir_swapped_for_outside_link_after_check(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, ws = tree
    (ws / "swap").mkdir()
    (ws / "swap" / "secret.txt").write_text("harmless\n")
    spy = _SwapAfterLstat("swap", _dir_to_link(ws, "../outside"))
    monkeypatch.setattr(_sandbox.os, "stat", spy)
    outcome = await attempt(base, ws, "read_file", "swap/secret.txt")
    monkeypatch.undo()
    assert spy.done
    assert outcome.content.startswith("Error: ")


async def test_dir_swapped_for_outside_link_before_write(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, ws = tree
    (ws / "swap").mkdir()
    spy = _SwapAfterLstat("swap", _dir_to_link(ws, "../outside"))
    monkeypatch.setattr(_sandbox.os, "stat", spy)
    await attempt(base, ws, "write_file", "swap/new.txt")
    monkeypatch.undo()
    assert spy.done


async def test_dir_swapped_for_inside_link_is_followed(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tree[1]
    (ws / "swap").mkdir()
    (ws / "swap" / "inner.txt").write_text("old dir\n")
    spy = _SwapAfterLstat("swap", _dir_to_link(ws, "sub"))
    monkeypatch.setattr(_sandbox.os, "stat", spy)
    outcome = await run_tool(ReadFile, {"path": "swap/inner.txt"}, context(ws))
    monkeypatch.undo()
    assert spy.done
    assert outcome.content == "     1\tinner"


async def test_link_swapped_for_dir_after_check_fails_cleanly(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tree[1]
    (ws / "swap").symlink_to("../outside")
    spy = _SwapAfterLstat("swap", _link_to_dir(ws))
    monkeypatch.setattr(_sandbox.os, "stat", spy)
    outcome = await run_tool(ReadFile, {"path": "swap/secret.txt"}, context(ws))
    monkeypatch.undo()
    assert spy.done
    assert SECRET not in outcome.content
    assert outcome.error_kind != "crashed", outcome.content


async def test_link_removed_after_check_fails_cleanly(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tree[1]
    (ws / "swap").symlink_to("sub")
    spy = _SwapAfterLstat("swap", lambda: os.unlink(ws / "swap"))
    monkeypatch.setattr(_sandbox.os, "stat", spy)
    outcome = await run_tool(ReadFile, {"path": "swap/inner.txt"}, context(ws))
    monkeypatch.undo()
    assert spy.done
    assert outcome.error_kind != "crashed", outcome.content


# ------------------------------------------------------------------ real races

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchanger() -> Callable[[Path, Path], None] | None:
    """renameat2(RENAME_EXCHANGE), when libc and the file system have it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return None
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int

    def exchange(a: Path, b: Path) -> None:
        if renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return exchange


class Flipper:
    """A thread that flips ``ws/flip`` between a real directory (holding a harmless
    ``secret.txt``) and a symlink to ``../outside`` as fast as it can."""

    def __init__(self, ws: Path, mode: str) -> None:
        self.flip = ws / "flip"
        self.spare = ws / ".flip_spare"
        self.link = ws / ".flip_link"
        self.dir = ws / ".flip_dir"
        self.flip.mkdir()
        (self.flip / "secret.txt").write_text("harmless\n")
        self.spare.symlink_to("../outside")
        self.mode = mode
        self.exchange = _exchanger() if mode == "exchange" else None
        if mode == "exchange":
            if self.exchange is None:
                pytest.skip("renameat2 is not available")
            try:
                self.exchange(self.flip, self.spare)
                self.exchange(self.flip, self.spare)
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    pytest.skip("RENAME_EXCHANGE is not supported here")
                raise
        self.stop = threading.Event()
        self.flips = 0
        self.stashed = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                if self.exchange is not None:
                    self.exchange(self.flip, self.spare)
                else:
                    # flip is the directory, spare the symlink: swap them through gaps
                    self._move(self.flip, self.dir)
                    self._move(self.spare, self.flip)
                    self._move(self.flip, self.spare)
                    self._move(self.dir, self.flip)
                self.flips += 1
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    def _move(self, source: Path, destination: Path) -> None:
        """Rename; a directory that write_file made at ``destination`` during a gap is
        moved aside (it is inside the root)."""
        while True:
            try:
                os.rename(source, destination)
                return
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
            self.stashed += 1
            with contextlib.suppress(FileNotFoundError):
                os.rename(destination, destination.with_name(f".stash{self.stashed}"))

    def __enter__(self) -> Flipper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize("mode", ["exchange", "rename"])
async def test_race_read_through_flipping_dir(tree: tuple[Path, Path], mode: str) -> None:
    base, ws = tree
    before = snapshot_outside(base, ws)
    seen: dict[str, int] = {}
    with Flipper(ws, mode) as flipper:
        for _ in range(300):
            outcome = await run_tool(ReadFile, {"path": "flip/secret.txt"}, context(ws))
            assert SECRET not in outcome.content
            if not outcome.is_error:
                assert outcome.content == "     1\tharmless"
            key = (
                "ok"
                if not outcome.is_error
                else f"{outcome.error_kind}: {outcome.content.split(':')[1]}"
            )
            seen[key] = seen.get(key, 0) + 1
    # Every race ends as a clean answer or a clean refusal, never a crash.
    assert not any(key.startswith("crashed") for key in seen), seen
    assert sum(seen.values()) == 300
    assert flipper.flips > 0, seen
    assert snapshot_outside(base, ws) == before


@pytest.mark.parametrize("mode", ["exchange", "rename"])
async def test_race_write_through_flipping_dir(tree: tuple[Path, Path], mode: str) -> None:
    base, ws = tree
    before = snapshot_outside(base, ws)
    seen: dict[str, int] = {}
    with Flipper(ws, mode) as flipper:
        for n in range(300):
            outcome = await run_tool(
                WriteFile, {"path": "flip/new.txt", "content": f"write {n}"}, context(ws)
            )
            assert not (base / "outside" / "new.txt").exists()
            key = (
                "ok"
                if not outcome.is_error
                else f"{outcome.error_kind}: {outcome.content.split(':')[1]}"
            )
            seen[key] = seen.get(key, 0) + 1
    # Every race ends as a clean answer or a clean refusal, never a crash.
    assert not any(key.startswith("crashed") for key in seen), seen
    assert sum(seen.values()) == 300
    assert flipper.flips > 0, seen
    assert snapshot_outside(base, ws) == before
    assert sorted(os.listdir(base / "outside")) == ["secret.txt", "sub"]


# ------------------------------------------------------------------ random paths

SEGMENTS = [
    "..",
    ".",
    "",
    "sub",
    "link_to_secret",
    "outdir",
    "inlink",
    "link1",
    "file.txt",
    "secret.txt",
    "/",
    "abs_outside",
    "sub/up",
    "sub/back",
    "to_ws2",
    "dangling_out",
    "{ws}",
    "{tmp}/outside",
    "{tmp}",
]


@pytest.fixture(scope="module")
def shared_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("hypothesis")
    yield base, make_tree(base)


def random_path(base: Path, ws: Path) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=8).map(
        lambda parts: fill("/".join(parts), base, ws)
    )


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_paths_never_read_the_secret(shared_tree: tuple[Path, Path], data: Any) -> None:
    base, ws = shared_tree
    path = data.draw(random_path(base, ws), label="path")
    for tool in (ReadFile, ListDir):
        outcome = trio.run(run_tool, tool, {"path": path}, context(ws))
        assert SECRET not in outcome.content
        assert outcome.error_kind in (None, "failed"), outcome.content


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_paths_never_write_outside(shared_tree: tuple[Path, Path], data: Any) -> None:
    base, ws = shared_tree
    path = data.draw(random_path(base, ws), label="path")
    before = snapshot_outside(base, ws)
    write = trio.run(run_tool, WriteFile, {"path": path, "content": "random"}, context(ws))
    assert write.error_kind in (None, "failed"), write.content
    edit = trio.run(run_tool, EditFile, {"path": path, "old": SECRET, "new": "PWNED"}, context(ws))
    assert edit.error_kind in (None, "failed"), edit.content
    assert SECRET not in write.content + edit.content
    assert snapshot_outside(base, ws) == before

"""The file tools (read_file, write_file, edit_file, list_dir): normal use and every limit."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from satsuma.testing import run_tool
from satsuma.tools.builtin._files import EditFile, ListDir, ReadFile, WriteFile


class SmallRead(ReadFile):
    max_bytes = 100


class ShortRead(ReadFile):
    max_chars = 50


class NarrowRead(ReadFile):
    max_line_chars = 10


class SmallWrite(WriteFile):
    max_bytes = 10


class SmallEdit(EditFile):
    max_bytes = 20


class ShortList(ListDir):
    max_entries = 3


def numbered(*lines: str, start: int = 1) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=start))


def assert_failed(outcome: Any, content: str) -> None:
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert outcome.content == content


@pytest.fixture
def ws(tool_workspace: Path) -> Path:
    return tool_workspace


# ---------------------------------------------------------------------------- read_file


async def test_read_whole_file(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("first\nsecond\n\nfourth\n")
    outcome = await run_tool(ReadFile, {"path": "a.txt"}, tool_context)
    assert not outcome.is_error
    assert outcome.content == numbered("first", "second", "", "fourth")
    assert outcome.details == {"path": "a.txt", "lines": [1, 4]}


async def test_read_without_final_newline(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("one\ntwo")
    outcome = await run_tool(ReadFile, {"path": "a.txt"}, tool_context)
    assert outcome.content == numbered("one", "two")


async def test_read_line_numbers_are_right_aligned(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 1201)))
    outcome = await run_tool(
        ReadFile, {"path": "a.txt", "start_line": 999, "end_line": 1001}, tool_context
    )
    assert outcome.content == "   999\tline 999\n  1000\tline 1000\n  1001\tline 1001"


async def test_read_in_subdirectory(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub" / "deep").mkdir(parents=True)
    (ws / "sub" / "deep" / "x.txt").write_text("x\n")
    outcome = await run_tool(ReadFile, {"path": "sub/deep/x.txt"}, tool_context)
    assert outcome.content == numbered("x")
    assert outcome.details == {"path": "sub/deep/x.txt", "lines": [1, 1]}


async def test_read_line_range(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("".join(f"l{n}\n" for n in range(1, 11)))
    outcome = await run_tool(
        ReadFile, {"path": "a.txt", "start_line": 3, "end_line": 5}, tool_context
    )
    assert outcome.content == numbered("l3", "l4", "l5", start=3)
    assert outcome.details == {"path": "a.txt", "lines": [3, 5]}


async def test_read_from_start_line_to_end(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("".join(f"l{n}\n" for n in range(1, 11)))
    outcome = await run_tool(ReadFile, {"path": "a.txt", "start_line": 9}, tool_context)
    assert outcome.content == numbered("l9", "l10", start=9)


async def test_read_up_to_end_line(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("".join(f"l{n}\n" for n in range(1, 11)))
    outcome = await run_tool(ReadFile, {"path": "a.txt", "end_line": 2}, tool_context)
    assert outcome.content == numbered("l1", "l2")


async def test_read_end_line_past_the_end(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("a\nb\nc\n")
    outcome = await run_tool(
        ReadFile, {"path": "a.txt", "start_line": 2, "end_line": 99}, tool_context
    )
    assert outcome.content == numbered("b", "c", start=2)
    assert outcome.details == {"path": "a.txt", "lines": [2, 3]}


async def test_read_single_line(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("a\nb\nc\n")
    outcome = await run_tool(
        ReadFile, {"path": "a.txt", "start_line": 2, "end_line": 2}, tool_context
    )
    assert outcome.content == numbered("b", start=2)


async def test_read_end_line_before_start_line(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("a\nb\nc\n")
    outcome = await run_tool(
        ReadFile, {"path": "a.txt", "start_line": 3, "end_line": 2}, tool_context
    )
    assert_failed(outcome, "Error: end_line (2) is before start_line (3)")


async def test_read_start_line_past_the_end(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("a\nb\nc\n")
    outcome = await run_tool(ReadFile, {"path": "a.txt", "start_line": 5}, tool_context)
    assert_failed(outcome, "Error: start_line 5 is past the end of a.txt (3 lines)")


async def test_read_start_line_zero_is_invalid(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("a\n")
    outcome = await run_tool(ReadFile, {"path": "a.txt", "start_line": 0}, tool_context)
    assert outcome.is_error
    assert outcome.error_kind == "invalid_args"


async def test_read_empty_file(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "empty.txt").write_bytes(b"")
    outcome = await run_tool(ReadFile, {"path": "empty.txt"}, tool_context)
    assert not outcome.is_error
    assert outcome.content == "(empty file: empty.txt)"


async def test_read_crlf_file(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    outcome = await run_tool(ReadFile, {"path": "win.txt"}, tool_context)
    assert outcome.content == numbered("one", "two", "three")
    assert "\r" not in outcome.content


async def test_read_binary_file_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "blob.bin").write_bytes(b"PNG\x00\x01\x02" * 10)
    outcome = await run_tool(ReadFile, {"path": "blob.bin"}, tool_context)
    assert_failed(outcome, "Error: Binary file refused: blob.bin (60 bytes)")


async def test_read_non_utf8_text_with_replacement(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "latin1.txt").write_bytes("café\nnaïve\n".encode("latin-1"))
    outcome = await run_tool(ReadFile, {"path": "latin1.txt"}, tool_context)
    assert not outcome.is_error
    assert outcome.content == numbered("caf\ufffd", "na\ufffdve")


async def test_read_directory_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    outcome = await run_tool(ReadFile, {"path": "sub"}, tool_context)
    assert_failed(outcome, "Error: Is a directory: sub (use list_dir)")


async def test_read_root_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(ReadFile, {"path": "."}, tool_context)
    assert_failed(outcome, "Error: Is a directory: . (use list_dir)")


async def test_read_fifo_refused_without_hanging(ws: Path, tool_context: dict[str, Any]) -> None:
    os.mkfifo(ws / "pipe")
    with trio.fail_after(10):
        outcome = await run_tool(ReadFile, {"path": "pipe"}, tool_context)
    assert_failed(outcome, "Error: Not a regular file: pipe")


async def test_read_missing_file(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(ReadFile, {"path": "nope.txt"}, tool_context)
    assert_failed(outcome, "Error: File not found: nope.txt")


async def test_read_missing_directory_on_the_way(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(ReadFile, {"path": "no/such/file.txt"}, tool_context)
    assert_failed(outcome, "Error: No such directory: no (on the way to no/such/file.txt)")


async def test_read_file_used_as_directory(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("x\n")
    outcome = await run_tool(ReadFile, {"path": "f.txt/inner"}, tool_context)
    assert_failed(outcome, "Error: Not a directory: f.txt (on the way to f.txt/inner)")


async def test_read_too_large_whole_but_readable_by_range(
    ws: Path, tool_context: dict[str, Any]
) -> None:
    (ws / "big.txt").write_text("".join(f"line {n:04}\n" for n in range(1, 21)))  # 200 bytes
    whole = await run_tool(SmallRead, {"path": "big.txt"}, tool_context)
    assert_failed(
        whole,
        "Error: File too large to read whole: big.txt is 200 bytes (limit 100); "
        "read it in parts with start_line and end_line",
    )
    from_one = await run_tool(SmallRead, {"path": "big.txt", "start_line": 1}, tool_context)
    assert from_one.is_error  # start_line=1 alone is still "whole"
    part = await run_tool(
        SmallRead, {"path": "big.txt", "start_line": 1, "end_line": 2}, tool_context
    )
    assert not part.is_error
    assert part.content == numbered("line 0001", "line 0002")
    tail = await run_tool(SmallRead, {"path": "big.txt", "start_line": 19}, tool_context)
    assert tail.content == numbered("line 0019", "line 0020", start=19)


async def test_read_file_at_max_bytes_is_whole(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "edge.txt").write_text("x" * 99 + "\n")  # exactly 100 bytes
    outcome = await run_tool(SmallRead, {"path": "edge.txt"}, tool_context)
    assert not outcome.is_error


async def test_read_output_cut_at_max_chars(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("".join(f"line{n}\n" for n in range(1, 21)))
    # each entry is 6 + 1 + 5 = 12 characters, plus a newline: 3 fit in 50, the 4th not
    outcome = await run_tool(ShortRead, {"path": "a.txt"}, tool_context)
    assert not outcome.is_error
    assert outcome.content == (
        numbered("line1", "line2", "line3")
        + "\n[... output cut at 50 characters after line 3; read on with start_line=4]"
    )
    assert outcome.details == {"path": "a.txt", "lines": [1, 3], "truncated": True}
    more = await run_tool(ShortRead, {"path": "a.txt", "start_line": 4}, tool_context)
    assert more.content.startswith(numbered("line4", "line5", "line6", start=4))
    assert more.content.endswith("read on with start_line=7]")


async def test_read_first_line_always_shown_even_over_max_chars(
    ws: Path, tool_context: dict[str, Any]
) -> None:
    (ws / "a.txt").write_text("y" * 80 + "\nshort\n")
    outcome = await run_tool(ShortRead, {"path": "a.txt"}, tool_context)
    assert outcome.content.startswith(f"     1\t{'y' * 80}\n")
    assert outcome.content.endswith("read on with start_line=2]")


async def test_read_long_lines_cut(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "min.js").write_text("abcdefghijklmnopqrstuvwxy\nshort\n0123456789\n")
    outcome = await run_tool(NarrowRead, {"path": "min.js"}, tool_context)
    assert outcome.content == numbered(
        "abcdefghij… [line cut: 15 more characters]", "short", "0123456789"
    )


async def test_read_absolute_path_inside(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "a.txt").write_text("abs\n")
    outcome = await run_tool(ReadFile, {"path": str(ws / "a.txt")}, tool_context)
    assert outcome.content == numbered("abs")
    assert outcome.details == {"path": "a.txt", "lines": [1, 1]}


# ---------------------------------------------------------------------------- write_file


async def test_write_creates_file_and_parents(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(
        WriteFile, {"path": "a/b/c/new.txt", "content": "héllo\n"}, tool_context
    )
    assert not outcome.is_error
    assert outcome.content == "Created a/b/c/new.txt (7 bytes)"
    assert (ws / "a" / "b" / "c" / "new.txt").read_text(encoding="utf-8") == "héllo\n"


async def test_write_replaces_atomically(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").write_text("old content\n")
    outcome = await run_tool(WriteFile, {"path": "sub/f.txt", "content": "new"}, tool_context)
    assert outcome.content == "Replaced sub/f.txt (3 bytes)"
    assert (ws / "sub" / "f.txt").read_text() == "new"
    assert sorted(os.listdir(ws / "sub")) == ["f.txt"]  # no temporary file left
    assert sorted(os.listdir(ws)) == ["sub"]


async def test_write_replaces_by_rename(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("old")
    before = os.stat(ws / "f.txt").st_ino
    reader = os.open(ws / "f.txt", os.O_RDONLY)  # a reader still sees the whole old file
    try:
        await run_tool(WriteFile, {"path": "f.txt", "content": "new"}, tool_context)
        assert os.read(reader, 100) == b"old"
    finally:
        os.close(reader)
    assert os.stat(ws / "f.txt").st_ino != before


async def test_write_empty_content(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(WriteFile, {"path": "e.txt", "content": ""}, tool_context)
    assert outcome.content == "Created e.txt (0 bytes)"
    assert (ws / "e.txt").read_bytes() == b""


async def test_write_keeps_existing_mode(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("old")
    os.chmod(ws / "f.txt", 0o640)
    await run_tool(WriteFile, {"path": "f.txt", "content": "new"}, tool_context)
    assert stat.S_IMODE(os.stat(ws / "f.txt").st_mode) == 0o640
    os.chmod(ws / "f.txt", 0o755)
    await run_tool(WriteFile, {"path": "f.txt", "content": "newer"}, tool_context)
    assert stat.S_IMODE(os.stat(ws / "f.txt").st_mode) == 0o755


async def test_write_new_file_mode_follows_umask(ws: Path, tool_context: dict[str, Any]) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    await run_tool(WriteFile, {"path": "n.txt", "content": "x"}, tool_context)
    assert stat.S_IMODE(os.stat(ws / "n.txt").st_mode) == 0o666 & ~umask


async def test_write_refuses_directory_target(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "keep.txt").write_text("keep")
    outcome = await run_tool(WriteFile, {"path": "sub", "content": "x"}, tool_context)
    assert_failed(outcome, "Error: Is a directory: sub")
    root = await run_tool(WriteFile, {"path": ".", "content": "x"}, tool_context)
    assert_failed(root, "Error: Is a directory: .")
    assert (ws / "sub" / "keep.txt").read_text() == "keep"
    assert sorted(os.listdir(ws)) == ["sub"]


async def test_write_refuses_fifo(ws: Path, tool_context: dict[str, Any]) -> None:
    os.mkfifo(ws / "pipe")
    with trio.fail_after(10):
        outcome = await run_tool(WriteFile, {"path": "pipe", "content": "x"}, tool_context)
    assert_failed(outcome, "Error: Not a regular file: pipe")


async def test_write_refuses_content_over_max_bytes(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(SmallWrite, {"path": "f.txt", "content": "x" * 11}, tool_context)
    assert_failed(outcome, "Error: content too large: 11 bytes (limit 10)")
    assert os.listdir(ws) == []
    # the limit counts UTF-8 bytes, not characters
    wide = await run_tool(SmallWrite, {"path": "f.txt", "content": "é" * 6}, tool_context)
    assert_failed(wide, "Error: content too large: 12 bytes (limit 10)")
    fits = await run_tool(SmallWrite, {"path": "f.txt", "content": "x" * 10}, tool_context)
    assert fits.content == "Created f.txt (10 bytes)"


async def test_write_through_symlink_inside(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "real.txt").write_text("old")
    (ws / "link.txt").symlink_to("real.txt")
    outcome = await run_tool(WriteFile, {"path": "link.txt", "content": "new"}, tool_context)
    assert not outcome.is_error
    assert outcome.content == "Replaced real.txt (3 bytes)"
    assert (ws / "real.txt").read_text() == "new"
    assert (ws / "link.txt").is_symlink()
    assert os.readlink(ws / "link.txt") == "real.txt"
    assert sorted(os.listdir(ws)) == ["link.txt", "real.txt"]


async def test_write_through_symlinked_dir_inside(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    (ws / "alias").symlink_to("sub")
    outcome = await run_tool(WriteFile, {"path": "alias/n.txt", "content": "n"}, tool_context)
    assert outcome.content == "Created sub/n.txt (1 bytes)"
    assert (ws / "sub" / "n.txt").read_text() == "n"
    assert (ws / "alias").is_symlink()


async def test_write_through_dangling_symlink_inside(
    ws: Path, tool_context: dict[str, Any]
) -> None:
    (ws / "later.txt").symlink_to("made/later-target.txt")
    outcome = await run_tool(WriteFile, {"path": "later.txt", "content": "x"}, tool_context)
    assert outcome.content == "Created made/later-target.txt (1 bytes)"
    assert (ws / "later.txt").is_symlink()
    assert (ws / "later.txt").read_text() == "x"


async def test_write_under_a_file_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("x")
    outcome = await run_tool(WriteFile, {"path": "f.txt/n.txt", "content": "x"}, tool_context)
    assert_failed(outcome, "Error: Not a directory: f.txt (on the way to f.txt/n.txt)")
    assert (ws / "f.txt").read_text() == "x"


# ---------------------------------------------------------------------------- edit_file


async def test_edit_unique_replace(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.py").write_text("def a():\n    return 1\n\ndef b():\n    return 2\n")
    outcome = await run_tool(
        EditFile, {"path": "f.py", "old": "return 2", "new": "return 20"}, tool_context
    )
    assert not outcome.is_error
    assert outcome.content == "Edited f.py: replaced 1 occurrence at line 5"
    assert (ws / "f.py").read_text() == "def a():\n    return 1\n\ndef b():\n    return 20\n"
    assert os.listdir(ws) == ["f.py"]


async def test_edit_multiline_replace_reports_first_line(
    ws: Path, tool_context: dict[str, Any]
) -> None:
    (ws / "f.txt").write_text("a\nb\nc\nd\n")
    outcome = await run_tool(EditFile, {"path": "f.txt", "old": "b\nc", "new": "X"}, tool_context)
    assert outcome.content == "Edited f.txt: replaced 1 occurrence at line 2"
    assert (ws / "f.txt").read_text() == "a\nX\nd\n"


async def test_edit_at_first_line(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("alpha\nbeta\n")
    outcome = await run_tool(
        EditFile, {"path": "f.txt", "old": "alpha", "new": "ALPHA"}, tool_context
    )
    assert outcome.content == "Edited f.txt: replaced 1 occurrence at line 1"


async def test_edit_keeps_mode(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "run.sh").write_text("echo a\n")
    os.chmod(ws / "run.sh", 0o750)
    await run_tool(EditFile, {"path": "run.sh", "old": "a", "new": "b"}, tool_context)
    assert (ws / "run.sh").read_text() == "echo b\n"
    assert stat.S_IMODE(os.stat(ws / "run.sh").st_mode) == 0o750


async def test_edit_zero_matches(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("hello\n")
    outcome = await run_tool(EditFile, {"path": "f.txt", "old": "Hello", "new": "x"}, tool_context)
    assert_failed(
        outcome,
        "Error: old text not found in f.txt; it must match the file exactly, whitespace and "
        "indentation included (read_file shows the current text)",
    )
    assert (ws / "f.txt").read_text() == "hello\n"


async def test_edit_several_matches(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("x = 1\nx = 1\nx = 1\n")
    outcome = await run_tool(
        EditFile, {"path": "f.txt", "old": "x = 1", "new": "x = 2"}, tool_context
    )
    assert_failed(
        outcome,
        "Error: old text occurs 3 times in f.txt; include more surrounding lines so that it "
        "matches exactly once",
    )
    assert (ws / "f.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_edit_old_equals_new(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("same\n")
    outcome = await run_tool(
        EditFile, {"path": "f.txt", "old": "same", "new": "same"}, tool_context
    )
    assert_failed(outcome, "Error: old and new are the same: nothing to change")


async def test_edit_empty_old_is_invalid(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("x\n")
    outcome = await run_tool(EditFile, {"path": "f.txt", "old": "", "new": "y"}, tool_context)
    assert outcome.is_error
    assert outcome.error_kind == "invalid_args"
    assert (ws / "f.txt").read_text() == "x\n"


async def test_edit_empty_new_deletes(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("keep\ndrop me\nkeep too\n")
    outcome = await run_tool(
        EditFile, {"path": "f.txt", "old": "drop me\n", "new": ""}, tool_context
    )
    assert outcome.content == "Edited f.txt: replaced 1 occurrence at line 2"
    assert (ws / "f.txt").read_text() == "keep\nkeep too\n"


async def test_edit_crlf_file_with_lf_old(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    outcome = await run_tool(
        EditFile, {"path": "win.txt", "old": "two\nthree", "new": "2\n3"}, tool_context
    )
    assert outcome.content == "Edited win.txt: replaced 1 occurrence at line 2"
    assert (ws / "win.txt").read_bytes() == b"one\r\n2\r\n3\r\n"


async def test_edit_crlf_file_single_line(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    outcome = await run_tool(EditFile, {"path": "win.txt", "old": "two", "new": "2"}, tool_context)
    assert not outcome.is_error
    assert (ws / "win.txt").read_bytes() == b"one\r\n2\r\n"


async def test_edit_non_utf8_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    data = "café\n".encode("latin-1")
    (ws / "l1.txt").write_bytes(data)
    outcome = await run_tool(EditFile, {"path": "l1.txt", "old": "caf", "new": "CAF"}, tool_context)
    assert_failed(outcome, "Error: Not UTF-8 text: l1.txt; edit_file edits UTF-8 files only")
    assert (ws / "l1.txt").read_bytes() == data


async def test_edit_binary_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    data = b"abc\x00def"
    (ws / "b.bin").write_bytes(data)
    outcome = await run_tool(EditFile, {"path": "b.bin", "old": "abc", "new": "x"}, tool_context)
    assert_failed(outcome, "Error: Binary file refused: b.bin")
    assert (ws / "b.bin").read_bytes() == data


async def test_edit_too_large_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("a" * 30)
    outcome = await run_tool(
        SmallEdit, {"path": "f.txt", "old": "a" * 30, "new": "b"}, tool_context
    )
    assert_failed(outcome, "Error: File too large to edit: f.txt is 30 bytes (limit 20)")


async def test_edit_missing_file(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(EditFile, {"path": "nope.txt", "old": "a", "new": "b"}, tool_context)
    assert_failed(outcome, "Error: File not found: nope.txt")
    assert os.listdir(ws) == []


async def test_edit_directory_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    outcome = await run_tool(EditFile, {"path": "sub", "old": "a", "new": "b"}, tool_context)
    assert_failed(outcome, "Error: Is a directory: sub (use list_dir)")


async def test_edit_fifo_refused(ws: Path, tool_context: dict[str, Any]) -> None:
    os.mkfifo(ws / "pipe")
    with trio.fail_after(10):
        outcome = await run_tool(EditFile, {"path": "pipe", "old": "a", "new": "b"}, tool_context)
    assert_failed(outcome, "Error: Not a regular file: pipe")


async def test_edit_through_symlink_inside(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "real.txt").write_text("v1\n")
    (ws / "link.txt").symlink_to("real.txt")
    outcome = await run_tool(EditFile, {"path": "link.txt", "old": "v1", "new": "v2"}, tool_context)
    assert outcome.content == "Edited real.txt: replaced 1 occurrence at line 1"
    assert (ws / "real.txt").read_text() == "v2\n"
    assert (ws / "link.txt").is_symlink()


# ---------------------------------------------------------------------------- list_dir


async def test_list_sorted_entries(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "b_dir").mkdir()
    (ws / "a.txt").write_text("hello")
    (ws / "c_link").symlink_to("a.txt")
    (ws / "big.bin").write_bytes(b"x" * 1234)
    (ws / "Upper.md").write_text("")
    outcome = await run_tool(ListDir, {"path": "."}, tool_context)
    assert not outcome.is_error
    assert outcome.content == "\n".join(
        [
            "[file] Upper.md (0 bytes)",
            "[file] a.txt (5 bytes)",
            "[dir] b_dir/",
            "[file] big.bin (1,234 bytes)",
            "[link] c_link -> a.txt",
        ]
    )


async def test_list_shows_dangling_and_outside_links_without_following(
    ws: Path, tool_context: dict[str, Any]
) -> None:
    (ws / "dangling").symlink_to("nowhere")
    (ws / "out").symlink_to("/etc")
    outcome = await run_tool(ListDir, {}, tool_context)
    assert outcome.content == "[link] dangling -> nowhere\n[link] out -> /etc"


async def test_list_other_entries(ws: Path, tool_context: dict[str, Any]) -> None:
    os.mkfifo(ws / "pipe")
    outcome = await run_tool(ListDir, {}, tool_context)
    assert outcome.content == "[other] pipe"


async def test_list_subdirectory(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub" / "inner").mkdir(parents=True)
    (ws / "sub" / "f").write_text("12")
    outcome = await run_tool(ListDir, {"path": "sub"}, tool_context)
    assert outcome.content == "[file] f (2 bytes)\n[dir] inner/"


async def test_list_through_symlink_inside(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "f").write_text("1")
    (ws / "alias").symlink_to("sub")
    outcome = await run_tool(ListDir, {"path": "alias"}, tool_context)
    assert outcome.content == "[file] f (1 bytes)"


async def test_list_empty_dir(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "sub").mkdir()
    outcome = await run_tool(ListDir, {"path": "sub"}, tool_context)
    assert not outcome.is_error
    assert outcome.content == "(empty directory: sub)"
    (ws / "sub").rmdir()
    root = await run_tool(ListDir, {"path": "."}, tool_context)
    assert root.content == "(empty directory: .)"


async def test_list_capped(ws: Path, tool_context: dict[str, Any]) -> None:
    for name in "edcba":
        (ws / name).write_text("")
    outcome = await run_tool(ShortList, {}, tool_context)
    assert outcome.content == "\n".join(
        [
            "[file] a (0 bytes)",
            "[file] b (0 bytes)",
            "[file] c (0 bytes)",
            "... and 2 more entries (list_dir shows 3)",
        ]
    )
    (ws / "d").unlink()
    (ws / "e").unlink()
    exact = await run_tool(ShortList, {}, tool_context)
    assert "more entries" not in exact.content


async def test_list_not_a_directory(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "f.txt").write_text("x")
    outcome = await run_tool(ListDir, {"path": "f.txt"}, tool_context)
    assert_failed(outcome, "Error: Not a directory: f.txt (use read_file)")


async def test_list_missing(ws: Path, tool_context: dict[str, Any]) -> None:
    outcome = await run_tool(ListDir, {"path": "nope"}, tool_context)
    assert_failed(outcome, "Error: No such directory: nope")


async def test_list_default_path_is_root(ws: Path, tool_context: dict[str, Any]) -> None:
    (ws / "only.txt").write_text("1")
    outcome = await run_tool(ListDir, {}, tool_context)
    assert outcome.content == "[file] only.txt (1 bytes)"
    absolute = await run_tool(ListDir, {"path": str(ws)}, tool_context)
    assert absolute.content == outcome.content
    empty = await run_tool(ListDir, {"path": ""}, tool_context)
    assert empty.content == outcome.content


# ---------------------------------------------------------------------------- context


DENIALS = [
    (ReadFile, {"path": "f.txt"}, {"write"}, "read"),
    (ListDir, {"path": "."}, {"write"}, "read"),
    (WriteFile, {"path": "f.txt", "content": "new"}, {"read"}, "write"),
    (EditFile, {"path": "f.txt", "old": "old", "new": "new"}, {"read"}, "write"),
    (EditFile, {"path": "f.txt", "old": "old", "new": "new"}, {"write"}, "read"),
    (ReadFile, {"path": "f.txt"}, set(), "read"),
]


@pytest.mark.parametrize(("tool", "args", "granted", "missing"), DENIALS)
async def test_capability_denied(
    ws: Path, tool: type[Any], args: dict[str, Any], granted: set[str], missing: str
) -> None:
    (ws / "f.txt").write_text("old")
    context = {"working_dir": ws, "capabilities": granted | {"shell", "network"}}
    outcome = await run_tool(tool, args, context)
    assert outcome.is_error
    assert outcome.error_kind == "denied"
    assert outcome.content == f"Error: Tool capability denied: {missing}"
    assert (ws / "f.txt").read_text() == "old"
    assert os.listdir(ws) == ["f.txt"]


TOOL_CALLS = [
    (ReadFile, {"path": "f.txt"}),
    (ListDir, {}),
    (WriteFile, {"path": "f.txt", "content": "x"}),
    (EditFile, {"path": "f.txt", "old": "a", "new": "b"}),
]


@pytest.mark.parametrize(("tool", "args"), TOOL_CALLS)
async def test_missing_working_dir(tmp_path: Path, tool: type[Any], args: dict[str, Any]) -> None:
    root = tmp_path / "gone"
    outcome = await run_tool(tool, args, {"working_dir": root, "capabilities": {"read", "write"}})
    assert_failed(outcome, f"Error: Workspace root is not a directory: {root}")
    assert not root.exists()


@pytest.mark.parametrize(("tool", "args"), TOOL_CALLS)
async def test_working_dir_is_a_file(tmp_path: Path, tool: type[Any], args: dict[str, Any]) -> None:
    root = tmp_path / "file"
    root.write_text("x")
    outcome = await run_tool(tool, args, {"working_dir": root, "capabilities": {"read", "write"}})
    assert_failed(outcome, f"Error: Workspace root is not a directory: {root}")
    assert root.read_text() == "x"


async def test_working_dir_given_through_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "f.txt").write_text("r\n")
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    context = {"working_dir": alias, "capabilities": {"read", "write"}}
    for path in ("f.txt", str(alias / "f.txt"), str(real / "f.txt")):
        outcome = await run_tool(ReadFile, {"path": path}, context)
        assert outcome.content == numbered("r"), path


async def test_working_dir_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rel").mkdir()
    (tmp_path / "rel" / "f.txt").write_text("rel\n")
    monkeypatch.chdir(tmp_path)
    outcome = await run_tool(
        ReadFile, {"path": "f.txt"}, {"working_dir": "rel", "capabilities": {"read"}}
    )
    assert outcome.content == numbered("rel")


_PEAK_MEMORY_SCRIPT = """
import sys, trio, satsuma
from satsuma.tools.builtin import ReadFile

async def main():
    runner = satsuma.ToolRunner([ReadFile])
    call = {"id": "t", "name": "read_file", "input": {"path": "big.txt", "start_line": 1, "end_line": 10}}
    (outcome,) = await runner.execute([call], {"working_dir": sys.argv[1], "capabilities": {"read"}})
    print(len(outcome.text), outcome.is_error)
    # VmHWM, this process's own peak: getrusage's ru_maxrss also counts the forked parent
    # (the pytest process) from before exec, on Linux.
    with open("/proc/self/status") as status:
        print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

trio.run(main)
"""


def test_a_line_range_of_a_huge_single_line_file_reads_in_bounded_memory(tmp_path: Path) -> None:
    # 256 MB on one line: reading it as a line would take several times that in memory.
    size = 256 * 1024 * 1024
    with open(tmp_path / "big.txt", "wb") as file:
        block = b"a" * (1 << 20)
        for _ in range(size // len(block)):
            file.write(block)
        file.write(b"\nsecond line\n")
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_MEMORY_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    chars, is_error, peak_kib = done.stdout.split()
    assert is_error == "False"
    assert int(chars) < 3_000  # the first line cut, with its note, and the second
    # Bounded by the output limit, not the file: far below the line's own 256 MB.
    assert int(peak_kib) < 150 * 1024, f"peak RSS {int(peak_kib) // 1024} MiB"

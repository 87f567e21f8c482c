"""The search tool's child program: its glob and .gitignore helpers, and the real process."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

WORKER = Path(__file__).resolve().parents[3] / "src/satsuma/tools/builtin/_search_worker.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_search_worker_under_test", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sw = _load()


# --------------------------------------------------------------------------- glob


@pytest.mark.parametrize(
    ("glob", "relpath", "expected"),
    [
        # no "/": the name, at any depth
        ("*.py", "a.py", True),
        ("*.py", "src/deep/a.py", True),
        ("*.py", "a.pyc", False),
        ("*.py", "a.py/x", False),
        ("a?.txt", "ab.txt", True),
        ("a?.txt", "a.txt", False),
        ("*", ".hidden", True),
        # classes
        ("[abc].py", "b.py", True),
        ("[abc].py", "d.py", False),
        ("[!abc].py", "d.py", True),
        ("[!abc].py", "a.py", False),
        ("[a-c]x", "bx", True),
        ("[a-c]x", "dx", False),
        ("[]]x", "]x", True),
        ("[", "[", True),
        # braces
        ("*.{py,md}", "x.md", True),
        ("*.{py,md}", "x.py", True),
        ("*.{py,md}", "x.rs", False),
        ("{a,b{c,d}}.txt", "bd.txt", True),
        ("{a,b{c,d}}.txt", "b.txt", False),
        ("{solo}.txt", "{solo}.txt", True),
        ("{a,*.py}", "x.py", True),
        # "/": the path relative to the root
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),
        ("src/*.py", "a.py", False),
        ("src/**/*.py", "src/a.py", True),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**/*.py", "lib/src/a.py", False),
        ("**/test_*.py", "test_a.py", True),
        ("**/test_*.py", "a/b/test_a.py", True),
        ("src/**", "src/a/b/c", True),
        ("src/**", "srcx/a", False),
        ("**/*.{py,md}", "a/b.md", True),
        ("docs/?/x", "docs/a/x", True),
        ("docs/?/x", "docs//x", False),
        ("a/[!b]/c", "a///c", False),
        ("./src/*.py", "src/a.py", True),
        # literal specials
        ("a+b(1).txt", "a+b(1).txt", True),
        ("a+b(1).txt", "aab1.txt", False),
        (r"\*.txt", "*.txt", True),
        (r"\*.txt", "a.txt", False),
        ("a.b", "axb", False),
    ],
)
def test_glob(glob: str, relpath: str, expected: bool) -> None:
    assert sw.glob_matches(glob, sw.glob_to_regex(glob), relpath) is expected


def test_glob_reversed_range_is_an_error() -> None:
    with pytest.raises(Exception, match="bad character range"):
        sw.glob_to_regex("[z-a].py")


# --------------------------------------------------------------------------- gitignore


def _rules(files: dict[str, str]) -> Any:
    rules = sw.IgnoreRules()
    for directory, text in files.items():  # in walk order: parents first
        rules.add(directory, text)
    return rules


@pytest.mark.parametrize(
    ("files", "relpath", "is_dir", "expected"),
    [
        # a bare name, at any depth
        ({"": "*.log\n"}, "a.log", False, True),
        ({"": "*.log\n"}, "x/y/a.log", False, True),
        ({"": "*.log\n"}, "a.txt", False, False),
        ({"": "build\n"}, "build", True, True),
        ({"": "build\n"}, "build", False, True),
        ({"": "build\n"}, "src/build", True, True),
        ({"": "build\n"}, "build/out.o", False, True),  # through the ignored directory
        # dir-only
        ({"": "build/\n"}, "build", False, False),
        ({"": "build/\n"}, "build", True, True),
        ({"": "build/\n"}, "a/build/x.c", False, True),
        # anchored
        ({"": "/todo\n"}, "todo", False, True),
        ({"": "/todo\n"}, "sub/todo", False, False),
        ({"": "doc/frotz\n"}, "doc/frotz", False, True),
        ({"": "doc/frotz\n"}, "a/doc/frotz", False, False),
        ({"": "doc/*.txt\n"}, "doc/a.txt", False, True),
        ({"": "doc/*.txt\n"}, "doc/sub/a.txt", False, False),
        # negation, last match wins
        ({"": "*.log\n!keep.log\n"}, "keep.log", False, False),
        ({"": "*.log\n!keep.log\n"}, "other.log", False, True),
        ({"": "!keep.log\n*.log\n"}, "keep.log", False, True),
        ({"": "build/\n!build/keep.txt\n"}, "build/keep.txt", False, True),  # parent excluded
        ({"": "build/*\n!build/keep.txt\n"}, "build/keep.txt", False, False),
        ({"": "build/*\n!build/keep.txt\n"}, "build/other.txt", False, True),
        # **
        ({"": "**/foo\n"}, "foo", False, True),
        ({"": "**/foo\n"}, "a/b/foo", False, True),
        ({"": "**/foo/bar\n"}, "x/foo/bar", False, True),
        ({"": "abc/**\n"}, "abc/x/y", False, True),
        ({"": "abc/**\n"}, "abc", True, False),
        ({"": "a/**/b\n"}, "a/b", False, True),
        ({"": "a/**/b\n"}, "a/x/y/b", False, True),
        ({"": "a/**/b\n"}, "c/a/b", False, False),
        ({"": "a**b\n"}, "axb", False, True),  # not a whole segment: a plain "*"
        ({"": "a**b\n"}, "ax/yb", False, False),
        # comments, blanks, escapes, trailing spaces
        ({"": "# comment\n\n   \n"}, "# comment", False, False),
        ({"": "\\#hash\n"}, "#hash", False, True),
        ({"": "\\!bang\n"}, "!bang", False, True),
        ({"": "trail   \n"}, "trail", False, True),
        ({"": "trail\\ \n"}, "trail ", False, True),
        ({"": "trail\\ \n"}, "trail", False, False),
        ({"": "crlf\r\n"}, "crlf", False, True),
        ({"": "[ab].tmp\n"}, "b.tmp", False, True),
        ({"": "[!ab].tmp\n"}, "b.tmp", False, False),
        ({"": "{a,b}.tmp\n"}, "{a,b}.tmp", False, True),  # no braces in gitignore
        ({"": "/\n!\n"}, "x", False, False),
        # nested .gitignore files
        ({"": "*.log\n", "sub": "!keep.log\n"}, "sub/keep.log", False, False),
        ({"": "*.log\n", "sub": "!keep.log\n"}, "keep.log", False, True),
        ({"": "*.log\n", "sub": "!keep.log\n"}, "other/keep.log", False, True),
        ({"sub": "/x\n"}, "sub/x", False, True),
        ({"sub": "/x\n"}, "x", False, False),
        ({"sub": "/x\n"}, "sub/y/x", False, False),
        ({"sub": "*.tmp\n"}, "sub/y/a.tmp", False, True),
        ({"sub": "*.tmp\n"}, "a.tmp", False, False),
        ({"": "!*.md\n", "sub": "*.md\n"}, "sub/a.md", False, True),
    ],
)
def test_gitignore(files: dict[str, str], relpath: str, is_dir: bool, expected: bool) -> None:
    assert _rules(files).is_ignored(relpath, is_dir) is expected


def test_parse_gitignore_flags() -> None:
    rules = sw.parse_gitignore("# c\n!/a/b/\nc\n")
    assert [(r.negate, r.dir_only) for r in rules] == [(True, True), (False, False)]


def test_matches_looks_at_the_path_only() -> None:
    rules = _rules({"": "build/\n"})
    assert rules.matches("build/out.o", False) is False
    assert rules.is_ignored("build/out.o", False) is True


# --------------------------------------------------------------------------- the process


def _run(root: Path, pattern: str, **overrides: Any) -> tuple[list[dict[str, Any]], int]:
    request: dict[str, Any] = {
        "root": os.path.realpath(root),
        "base": "",
        "pattern": pattern,
        "glob": None,
        "max_matches": 100,
        "max_line_chars": 300,
        "max_file_bytes": 2_000_000,
    }
    request.update(overrides)
    proc = subprocess.run(
        [sys.executable, "-I", str(WORKER)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.stderr == ""
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.returncode


def _matches(lines: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    return [(m["path"], m["line"], m["text"]) for m in lines if "path" in m]


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root


def test_matches_with_paths_and_line_numbers(root: Path) -> None:
    _write(root, {"a.py": "x\nneedle one\ny\nneedle two\n", "sub/b.txt": "needle\r\n"})
    lines, rc = _run(root, r"needle\b")
    assert rc == 0
    assert _matches(lines) == [
        ("a.py", 2, "needle one"),
        ("a.py", 4, "needle two"),
        ("sub/b.txt", 1, "needle"),
    ]
    assert lines[-1] == {
        "done": True,
        "files_searched": 2,
        "binary_skipped": 0,
        "large_skipped": 0,
        "deep_skipped": 0,
        "truncated": False,
    }


def test_base_prefix(root: Path) -> None:
    _write(root, {"a.py": "needle\n", "d/b.py": "needle\n"})
    lines, _ = _run(root, "needle", base="src/pkg")
    assert [m[0] for m in _matches(lines)] == ["src/pkg/a.py", "src/pkg/d/b.py"]


def test_glob_filters_by_name_and_by_path(root: Path) -> None:
    _write(root, {"a.py": "n\n", "b.md": "n\n", "c.rs": "n\n", "d/e.py": "n\n", "f/g.py": "n\n"})
    lines, _ = _run(root, "n", glob="*.{py,md}")
    assert [m[0] for m in _matches(lines)] == ["a.py", "b.md", "d/e.py", "f/g.py"]
    assert lines[-1]["files_searched"] == 4
    lines, _ = _run(root, "n", glob="d/*.py")
    assert [m[0] for m in _matches(lines)] == ["d/e.py"]


def test_git_directory_skipped(root: Path) -> None:
    _write(root, {".git/config": "needle\n", "sub/.git/HEAD": "needle\n", "a": "needle\n"})
    lines, _ = _run(root, "needle")
    assert [m[0] for m in _matches(lines)] == ["a"]


def test_gitignored_files_and_directories_skipped(root: Path) -> None:
    _write(
        root,
        {
            ".gitignore": "*.log\nbuild/\n/top.txt\n",
            "a.log": "needle\n",
            "keep.txt": "needle\n",
            "top.txt": "needle\n",
            "build/out.txt": "needle\n",
            "sub/top.txt": "needle\n",
            "sub/.gitignore": "!keep.log\nsecret/\n",
            "sub/keep.log": "needle\n",
            "sub/other.log": "needle\n",
            "sub/secret/x": "needle\n",
            "other/secret/x": "needle\n",
        },
    )
    lines, _ = _run(root, "needle")
    assert [m[0] for m in _matches(lines)] == [
        "keep.txt",
        "other/secret/x",
        "sub/keep.log",
        "sub/top.txt",
    ]


def test_gitignore_above_root_not_read(root: Path) -> None:
    _write(root, {".gitignore": "*.txt\n", "sub/a.txt": "needle\n"})
    lines, _ = _run(root / "sub", "needle", base="sub")
    assert _matches(lines) == [("sub/a.txt", 1, "needle")]


def test_binary_skipped_and_counted(root: Path) -> None:
    _write(root, {"bin.dat": b"needle\0\x01\x02", "late.dat": b"x" * 9000 + b"\0needle\n"})
    lines, _ = _run(root, "needle")
    # a NUL past the first 8 KiB does not make a file binary
    assert _matches(lines) == [("late.dat", 1, "x" * 300 + "…")]
    assert lines[-1]["binary_skipped"] == 1
    assert lines[-1]["files_searched"] == 1


def test_large_file_skipped_and_counted(root: Path) -> None:
    _write(root, {"big.txt": "needle\n" * 100, "small.txt": "needle\n"})
    lines, _ = _run(root, "needle", max_file_bytes=100)
    assert _matches(lines) == [("small.txt", 1, "needle")]
    assert lines[-1]["large_skipped"] == 1
    assert lines[-1]["files_searched"] == 1


def test_max_matches_truncates(root: Path) -> None:
    _write(root, {"a.txt": "needle\n" * 5, "b.txt": "needle\n"})
    lines, _ = _run(root, "needle", max_matches=3)
    assert _matches(lines) == [
        ("a.txt", 1, "needle"),
        ("a.txt", 2, "needle"),
        ("a.txt", 3, "needle"),
    ]
    assert lines[-1]["truncated"] is True


def test_exactly_max_matches_is_not_truncated(root: Path) -> None:
    _write(root, {"a.txt": "needle\n" * 3})
    lines, _ = _run(root, "needle", max_matches=3)
    assert len(_matches(lines)) == 3
    assert lines[-1]["truncated"] is False


def test_long_line_cut(root: Path) -> None:
    _write(root, {"a.txt": "needle" + "x" * 100 + "\nneedle short\n"})
    lines, _ = _run(root, "needle", max_line_chars=10)
    assert _matches(lines) == [("a.txt", 1, "needlexxxx…"), ("a.txt", 2, "needle sho…")]


def test_symlink_to_file_outside_root_not_followed(tmp_path: Path, root: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET needle\n", encoding="utf-8")
    _write(root, {"a.txt": "needle\n"})
    (root / "link.txt").symlink_to(secret)
    proc_lines, _ = _run(root, "needle|TOPSECRET")
    assert _matches(proc_lines) == [("a.txt", 1, "needle")]
    assert "TOPSECRET" not in json.dumps(proc_lines)
    assert proc_lines[-1]["files_searched"] == 1


def test_symlinked_directory_not_followed(tmp_path: Path, root: Path) -> None:
    outside = tmp_path / "outside"
    _write(outside, {"x.txt": "TOPSECRET\n"})
    _write(root, {"real/a.txt": "needle\n"})
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "real" / "loop").symlink_to(root, target_is_directory=True)
    lines, _ = _run(root, "needle|TOPSECRET")
    assert _matches(lines) == [("real/a.txt", 1, "needle")]


def test_fifo_and_symlinked_gitignore_skipped(tmp_path: Path, root: Path) -> None:
    other = tmp_path / "ignore-all"
    other.write_text("*\n", encoding="utf-8")
    (root / ".gitignore").symlink_to(other)
    os.mkfifo(root / "pipe")
    _write(root, {"a.txt": "needle\n"})
    lines, _ = _run(root, "needle")
    assert _matches(lines) == [("a.txt", 1, "needle")]


def test_invalid_regex(root: Path) -> None:
    lines, rc = _run(root, "(unclosed")
    assert rc == 0
    assert len(lines) == 1
    assert lines[0]["error"].startswith("Invalid regex: missing ), unterminated subpattern")


def test_invalid_glob(root: Path) -> None:
    lines, rc = _run(root, "x", glob="[z-a]")
    assert rc == 0
    assert lines[0]["error"].startswith("Invalid glob:")


def test_malformed_request(root: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-I", str(WORKER)],
        input="not json",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"].startswith("Invalid request:")


def test_root_not_a_directory(root: Path) -> None:
    _write(root, {"f": "x\n"})
    lines, rc = _run(root / "f", "x")
    assert rc == 0
    assert lines == [{"error": "Not a directory"}]


def test_deterministic_order(root: Path) -> None:
    names = ["b/z.txt", "a/y.txt", "c.txt", "a.txt", "B.txt", "a/b/x.txt", "ab/w.txt"]
    _write(root, dict.fromkeys(reversed(names), "needle\n"))
    first, _ = _run(root, "needle")
    second, _ = _run(root, "needle")
    assert first == second
    # each directory's files in name order, then its subdirectories in name order
    assert [m[0] for m in _matches(first)] == [
        "B.txt",
        "a.txt",
        "c.txt",
        "a/y.txt",
        "a/b/x.txt",
        "ab/w.txt",
        "b/z.txt",
    ]


def test_non_utf8_text_still_searched(root: Path) -> None:
    _write(root, {"latin1.txt": "caf\xe9 needle\n".encode("latin-1"), "utf8.txt": "été needle\n"})
    lines, _ = _run(root, "needle")
    assert _matches(lines) == [
        ("latin1.txt", 1, "caf\ufffd needle"),
        ("utf8.txt", 1, "été needle"),
    ]


def test_output_is_flushed_line_by_line(root: Path) -> None:
    _write(root, {"a.txt": "needle\n", "b.txt": "(x+x+)+y" + "x" * 40 + "\n"})
    request = {
        "root": os.path.realpath(root),
        "base": "",
        "pattern": "needle|(x+x+)+y$",
        "glob": None,
        "max_matches": 100,
        "max_line_chars": 300,
        "max_file_bytes": 2_000_000,
    }
    proc = subprocess.Popen(
        [sys.executable, "-I", str(WORKER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(request))
        proc.stdin.close()
        first = proc.stdout.readline()  # written before the catastrophic line is reached
        assert json.loads(first) == {"path": "a.txt", "line": 1, "text": "needle"}
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()

"""The token file: made with hashes only, mode 0600, read line by line with errors that
name the file and the line; tokens found in constant time, scopes and agents kept."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from satsuma.serve import Principal, TokenBook, TokenFileError, create_token
from satsuma.serve._tokens import hash_token


def test_create_appends_a_hash_never_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    ops = create_token(path, name="ops", scopes=["run", "read"], agents=["support"])
    boss = create_token(path, name="boss", scopes=["admin"])
    assert ops.startswith("sat_") and len(ops) > 40 and ops != boss
    text = path.read_text()
    assert ops not in text and boss not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = text.splitlines()
    assert lines[0].startswith("#")
    assert lines[1] == f"{hash_token(ops)} ops read,run support"
    assert lines[2] == f"{hash_token(boss)} boss admin *"
    book = TokenBook.from_file(path)
    assert book.authenticate(ops) == Principal(
        "ops", frozenset({"run", "read"}), frozenset({"support"})
    )
    assert book.authenticate(boss) == Principal("boss", frozenset({"admin"}), None)
    assert book.authenticate(ops + "x") is None
    assert book.authenticate("") is None


@pytest.mark.parametrize(
    ("name", "scopes", "agents", "message"),
    [
        ("two words", ["run"], None, "bad token name 'two words'"),
        ("ops", ["fly"], None, "unknown scope 'fly'"),
        ("ops", [], None, "no scope"),
        ("ops", ["run"], ["a b"], "bad agent name 'a b'"),
        ("ops", ["run"], [], "no agent"),
    ],
)
def test_create_refuses_bad_settings(
    tmp_path: Path, name: str, scopes: list[str], agents: list[str] | None, message: str
) -> None:
    with pytest.raises(TokenFileError, match=message):
        create_token(tmp_path / "t.txt", name=name, scopes=scopes, agents=agents)
    assert not (tmp_path / "t.txt").exists()


def test_a_name_is_taken_once(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    create_token(path, name="ops", scopes=["read"])
    with pytest.raises(TokenFileError, match="has a token named 'ops' already"):
        create_token(path, name="ops", scopes=["run"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("sha256:abc ops run *", "the hash is not sha256: and 64 hex digits"),
        (f"sha256:{'0' * 64} ops run", "expected 4 fields"),
        (f"sha256:{'0' * 64} ops sing *", "unknown scope 'sing'"),
        (f"sha256:{'0' * 64} o/ps run *", "bad token name"),
    ],
)
def test_a_bad_line_names_the_file_and_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "t.txt"
    path.write_text(f"# comment\n\nsha256:{'1' * 64} fine read *\n{line}\n")
    with pytest.raises(TokenFileError, match=f"{path}, line 4: {message}"):
        TokenBook.from_file(path)


def test_duplicate_names_and_missing_files(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(f"sha256:{'1' * 64} a read *\nsha256:{'2' * 64} a read *\n")
    with pytest.raises(TokenFileError, match="line 2: a second token named 'a'"):
        TokenBook.from_file(path)
    with pytest.raises(TokenFileError, match=r"cannot read the token file .*missing"):
        TokenBook.from_file(tmp_path / "missing")


def test_the_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    first = create_token(path, name="first", scopes=["read"])
    book = TokenBook.from_file(path)
    second = create_token(path, name="second", scopes=["read"])
    assert book.authenticate(second) is not None
    # Revoked: its line removed.
    path.write_text(
        "".join(line + "\n" for line in path.read_text().splitlines() if "first" not in line)
    )
    assert book.authenticate(first) is None
    path.unlink()
    with pytest.raises(TokenFileError):
        book.authenticate(second)

"""satsuma/_terminal.py: what the command does to text it did not write before a terminal
sees it. The commands and the live view, driven with such text, are in
tests/test_untrusted_output.py."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
from pathlib import Path

from rich.console import Console
from rich.text import Text

import satsuma
from satsuma._terminal import TerminalLogHandler, json_safe, visible, visible_text

# Every character that must not reach a terminal as itself: C0 controls but "\n" and
# "\t", DEL, C1 controls, bidi controls, the line and paragraph separators, surrogates.
RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\u2028\u2029\ud800-\udfff]"
)
MARKUP = "[bold red]red[/] [link=https://evil.example]click[/link]"
CONTROLS = (
    "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: write the clipboard
    "\x1b[1A\x1b[2KFAKE LINE"  # cursor up, erase the line, a forged line
    "\rover"  # a bare carriage return
    "\u202eevil\u202c \u2066iso\u2069 \u200e\u200f\u061c"  # bidi overrides, isolates, marks
    "\x9b31m\x85\x7f\x00\x08\x0c"  # CSI and NEL (C1), DEL, NUL, backspace, form feed
    "\u2028\u2029\ud800"  # separators, a lone surrogate (JSON can carry one)
)
HOSTILE = f"{MARKUP} {CONTROLS}"
# Passes unchanged: accents, combining marks, CJK, emoji with joiners and flags.
NICE = "café e\u0301 中文 한국어 👩\u200d💻 🇯🇵 ✓ — ½"


def assert_clean(output: str) -> None:
    found = sorted({f"U+{ord(char):04X}" for char in RAW.findall(output)})
    assert not found, f"raw control characters reached the output: {found}\n{output!r}"


# --- visible ----------------------------------------------------------------------------


def test_every_control_character_is_escaped_as_repr_would() -> None:
    controls = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
    others = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
    for code in [*controls, *others, 0x2028, 0x2029, 0xD800, 0xDFFF]:
        char = chr(code)
        shown = visible(f"a{char}b")
        assert_clean(shown)
        assert "\n" not in shown and "\t" not in shown
        expected = repr(char)[1:-1] if code < 0x100 else f"\\u{code:04x}"
        assert shown == f"a{expected}b", hex(code)
    assert visible("\x1b[2J") == "\\x1b[2J"
    assert visible("a\r\nb") == "a\\r\\nb"


def test_text_meant_to_span_lines_keeps_its_lines_and_tabs() -> None:
    assert visible("one\n\ttwo\r\nthree\rfour\x1b", lines=True) == ("one\n\ttwo\nthree\\rfour\\x1b")
    assert_clean(visible(HOSTILE, lines=True))


def test_normal_unicode_passes_unchanged() -> None:
    for text in (
        NICE,
        "plain ascii [not markup] \\x1b",
        "Ωç√∫µ≤ ∑ ≠",
        "日本語のテキスト",
        "\u200d\u200b",
    ):
        assert visible(text) == text
        assert visible(text, lines=True) == text
        assert json_safe(json.dumps(text, ensure_ascii=False)) == json.dumps(
            text, ensure_ascii=False
        )
    assert visible(NICE) is NICE  # no copy for text with nothing to escape


def test_a_rich_text_keeps_its_styles_on_the_characters_they_styled() -> None:
    text = Text.assemble(("red\x1b", "red"), " plain ", ("\u202eblue", "blue"), "\r\nend")
    shown = visible_text(text)
    assert shown.plain == "red\\x1b plain \\u202eblue\nend"
    styled = {shown.plain[span.start : span.end]: str(span.style) for span in shown.spans}
    assert styled == {"red\\x1b": "red", "\\u202eblue": "blue"}


def test_json_stays_the_same_value_and_becomes_safe() -> None:
    values = [HOSTILE, {HOSTILE: [HOSTILE, NICE, 1]}, NICE]
    for value in values:
        for indent in (None, 2):
            written = json.dumps(value, ensure_ascii=False, indent=indent) + "\n"
            safe = json_safe(written)
            assert_clean(safe)
            assert json.loads(safe) == value
            assert safe.endswith("\n")


# --- log lines ----------------------------------------------------------------------------


def test_log_records_are_shown_visibly_and_never_as_markup() -> None:
    out = io.StringIO()
    console = Console(width=300, force_terminal=False, file=out)
    logger = logging.getLogger("satsuma.test_terminal")
    handler = TerminalLogHandler(console=console, show_path=False, show_time=False)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("agent %s said %s", f"id{CONTROLS}", HOSTILE)
        logger.warning(HOSTILE, extra={"markup": True})  # a record asking for markup
        try:
            raise RuntimeError(HOSTILE)
        except RuntimeError:
            logger.exception("a tool crashed: %s", NICE)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    shown = out.getvalue()
    assert_clean(shown)
    assert shown.count(MARKUP) == 3
    assert NICE in shown
    assert "Traceback (most recent call last)" in shown  # the traceback keeps its lines


# --- one way out ---------------------------------------------------------------------------


def test_the_command_prints_only_through_the_terminal_module() -> None:
    # say() and show() make text visible and turn markup off: a print beside them would
    # be a way round. The command's modules, and the live view, print nothing else.
    source = Path(satsuma.__file__).parent
    modules = [
        "cli.py",
        "_commands.py",
        "_run_command.py",
        "_runs_command.py",
        "_chat_command.py",
        "_fake_server.py",
        "_arguments.py",
        "_cluster_commands.py",
        "_store_commands.py",
        "_live.py",
        "_demo.py",
    ]
    for name in modules:
        tree = ast.parse((source / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in ("print", "print_json", "log", "out"), (
                    f"{name}:{node.lineno} prints past satsuma._terminal"
                )

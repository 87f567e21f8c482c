"""Text the ``satsuma`` command did not write, made safe to show on a terminal.

Model text, tool output, tool names and inputs, agent ids, approval reasons, error
messages and log records all come from outside: a model, a tool's program, a database a
cluster shares. Printed as they are, their control characters are commands to the
terminal: OSC 52 writes the operator's clipboard, cursor-up plus erase-line forges lines
above an approval prompt, a bidi override shows ``rm -rf /`` reversed. Every text the
command prints of theirs goes through ``visible`` (one function, one set of rules);
printing itself goes through ``say``, which also keeps rich from reading ``[bold]`` or
``[link=...]`` in such text as markup.

What ``visible`` escapes, in the form Python's ``repr`` uses:

- C0 controls (U+0000-U+001F), DEL (U+007F) and C1 controls (U+0080-U+009F), among
  them ESC, BEL and CSI: ``\\x1b``, ``\\x07``, ``\\x9b``; ``\\t``, ``\\n``, ``\\r``;
- bidi controls: the embeddings and overrides U+202A-U+202E, the isolates
  U+2066-U+2069, the marks U+200E, U+200F and U+061C: ``\\u202e``;
- the line and paragraph separators U+2028 and U+2029, which some terminals and
  viewers break lines at: ``\\u2028``;
- lone surrogates (U+D800-U+DFFF; JSON can carry them), which no terminal encoding
  can write: ``\\ud800``.

Text meant to span lines (a model's answer, a tool's output, a traceback) keeps its
``\\n`` and ``\\t`` (``\\r\\n`` is shown as ``\\n``); a line break elsewhere, a bare
``\\r`` anywhere, is escaped. A tab only moves the cursor right, erasing nothing, so it
cannot forge or hide text. Everything else passes unchanged: accents, CJK, emoji (with
their zero-width joiners), box drawing.

A backslash is not escaped: the output ``\\x1b`` may have been those four characters or
one ESC. The guarantee is that no control character reaches the terminal, not that the
text can be read back exactly; for that, ``--json`` writes it losslessly (``json_safe``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import IO, Final

from rich.console import Console, ConsoleRenderable, RenderableType
from rich.logging import RichHandler
from rich.text import Span, Text

__all__ = [
    "TerminalLogHandler",
    "TerminalWriter",
    "json_safe",
    "say",
    "show",
    "visible",
    "visible_text",
]


def _code_points() -> list[int]:
    controls = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
    bidi = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
    separators = [0x2028, 0x2029]
    surrogates = list(range(0xD800, 0xE000))
    return [*controls, *bidi, *separators, *surrogates]


def _escape(code: int) -> str:
    named = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
    if code in named:
        return named[code]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ESCAPES: Final[dict[int, str]] = {code: _escape(code) for code in _code_points()}
# For text meant to span lines: "\n" and "\t" stay what they are.
_ESCAPES_IN_LINES: Final[dict[int, str]] = {
    code: shown for code, shown in _ESCAPES.items() if code not in (0x09, 0x0A)
}
_UNSAFE: Final = re.compile("[" + "".join(re.escape(chr(code)) for code in _ESCAPES) + "]")
# In JSON text, C0 controls are whitespace between values (a line's "\n") or escaped
# already inside strings, which json.dumps always does; the rest it leaves raw.
_UNSAFE_IN_JSON: Final = re.compile(
    "[" + "".join(re.escape(chr(code)) for code in _ESCAPES if code >= 0x20) + "]"
)


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character that could command a terminal shown as an escape.

    Args:
        text: Text from a model, a tool, a store: anything the command did not write.
        lines: The text is meant to span lines (a model's answer, a tool's output, a
            traceback): ``\\n`` and ``\\t`` stay, ``\\r\\n`` becomes ``\\n``. Otherwise
            (an id, a name, a one-line field) they are escaped too, so that the field
            cannot start a line that looks like another.

    Returns:
        The text with the characters listed in the module's docstring escaped as
        Python's ``repr`` would (``\\x1b``, ``\\u202e``); unchanged if it has none.
    """
    if _UNSAFE.search(text) is None:
        return text  # the common case, and no copy
    if lines:
        return text.replace("\r\n", "\n").translate(_ESCAPES_IN_LINES)
    return text.translate(_ESCAPES)


def visible_text(text: Text) -> Text:
    """A rich ``Text`` whose characters are made ``visible`` (as text meant to span lines),
    each span kept on the characters it styled. The last guard of ``say`` and the live
    view: the fields a caller put in were made visible already, one line or many."""
    plain = text.plain
    if _UNSAFE.search(plain) is None:
        return text
    shown: list[str] = []
    starts: list[int] = []  # where each character of ``plain`` starts in the result
    length = 0
    for index, char in enumerate(plain):
        starts.append(length)
        piece = "" if char == "\r" and plain[index + 1 : index + 2] == "\n" else char
        piece = piece.translate(_ESCAPES_IN_LINES)
        shown.append(piece)
        length += len(piece)
    starts.append(length)
    result = Text(
        "".join(shown),
        style=text.style,
        justify=text.justify,
        overflow=text.overflow,
        no_wrap=text.no_wrap,
        end=text.end,
        tab_size=text.tab_size,
    )
    result.spans = [Span(starts[span.start], starts[span.end], span.style) for span in text.spans]
    return result


def say(
    console: Console,
    *parts: str | Text | tuple[str, str],
    style: str = "",
    end: str = "\n",
    soft_wrap: bool = True,
) -> None:
    """Print one line (or a block of text meant to span lines) on ``console``: parts
    as ``Text.assemble`` takes them (a string, a ``Text``, a ``(string, style)`` pair),
    every one made ``visible`` and none read as markup or highlighted.

    A part that is one field of a line (an id, a name) should be passed through
    ``visible`` first, which escapes its line breaks too; this function keeps them, so
    that multi-line text (a run's answer, a traceback) reads as it was written.
    """
    assembled = Text.assemble(*parts, style=style, end=end)
    console.print(visible_text(assembled), highlight=False, markup=False, soft_wrap=soft_wrap)


def show(console: Console, renderable: RenderableType, *, soft_wrap: bool = False) -> None:
    """Print a renderable the command built (a live view's tree, a table) whose text
    came through ``visible`` or ``visible_text``; a ``Text`` goes through it again, and
    a ``str`` is plain text. (The strings inside a renderable, a table's cells, are
    rich markup: the command's own, which is why untrusted text never goes there raw.)"""
    if isinstance(renderable, str):
        renderable = Text(renderable)
    if isinstance(renderable, Text):
        renderable = visible_text(renderable)
    console.print(renderable, highlight=False, soft_wrap=soft_wrap)


def json_safe(text: str) -> str:
    """JSON text with the characters ``visible`` escapes written as JSON escapes
    (``\\u009b``, ``\\u202e``): the same JSON value, safe on a terminal.

    Valid only for JSON text (what ``json.dumps`` writes): outside its strings it has no
    such character, and inside one a ``\\uXXXX`` escape stands for the character itself.
    ``json.dumps`` escapes C0 controls already (those left are whitespace between
    values), but not DEL, C1 or bidi controls or lone surrogates when ``ensure_ascii`` is
    off (as it is, to keep accents and CJK readable).
    """
    if _UNSAFE_IN_JSON.search(text) is None:
        return text
    return _UNSAFE_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


class TerminalWriter:
    """A text file that writes JSON lines through ``json_safe``: hand it to a
    ``JsonLinesLog`` (``satsuma run --json``) in place of ``sys.stdout``."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file

    def write(self, text: str) -> int:
        return self._file.write(json_safe(text))

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._file.flush()


class TerminalLogHandler(RichHandler):
    """The command's log handler: rich's, with every record's message (and the traceback
    formatted into it) made ``visible`` and never read as markup, whatever the record's
    ``markup`` extra says. A record's text carries agent ids, tool output and error
    messages, as untrusted as any."""

    def render_message(self, record: logging.LogRecord, message: str) -> ConsoleRenderable:
        text = Text(visible(message, lines=True))
        highlighter = getattr(record, "highlighter", self.highlighter)
        if highlighter:
            text = highlighter(text)
        return text

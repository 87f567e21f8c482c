"""Text from outside made safe to keep, send and print: valid Unicode, and an
exception's message read without trusting the exception.

A Python ``str`` may hold lone surrogates (U+D800 to U+DFFF), which no UTF-8 encoder,
JSON-over-HTTP request or PostgreSQL ``jsonb`` accepts: one in a tool's result, a
model's response or a prompt would fail every later request of the conversation (the
SDK encodes the whole history) and every write of it. ``valid_text`` replaces them, once,
where text enters; everything downstream is valid Unicode.

An exception's ``__str__`` is the thrower's code: it may raise, return something that is
not a str, or return a str subclass with methods of its own. ``exception_message``
reads it without letting any of that escape.

Imports nothing of satsuma: every room uses it.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "MESSAGE_LIMIT",
    "describe_exception",
    "describe_exception_text",
    "exception_message",
    "is_valid_text",
    "leaf_exceptions",
    "reportable",
    "type_name",
    "valid_str",
    "valid_text",
]

REPLACEMENT: Final = "\ufffd"

# What of an exception's message goes into a line that is not the model's (a log line, a
# span's status, another exception's message): enough to read, never a megabyte.
MESSAGE_LIMIT: Final = 2_000


def is_valid_text(text: str) -> bool:
    """Whether the exact str ``text`` holds no surrogate code point (UTF-8 can encode it).

    Cheap for ordinary text: ASCII is known from the string's header without a scan
    (``str.isascii`` is constant time in CPython); other text is encoded once, which
    measured about 1 ms a megabyte and is only done on text that is not ASCII.
    """
    if str.isascii(text):
        return True
    try:
        str.encode(text, "utf-8")
    except UnicodeEncodeError:
        return False
    return True


def valid_text(text: str) -> str:
    """``text`` (an exact str) with every surrogate code point made valid: a high
    surrogate directly followed by a low one becomes the character the pair stands for
    (as ``json.loads`` reads the two escapes), any other is replaced by U+FFFD, as a
    decoder's ``errors="replace"`` does. Valid text comes back as it is (the same object).
    """
    if is_valid_text(text):
        return text
    # UTF-16 can carry surrogates (surrogatepass); decoding it back joins the pairs and
    # replaces each lone one.
    return str.encode(text, "utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def exception_message(exc: BaseException, *, limit: int | None = None) -> str | None:
    """``str(exc)`` as an exact, valid str (see ``valid_text``), or None when it could
    not be read: its ``__str__`` raised or returned something that is not a str.

    ``limit``: keep at most this many characters (the rest said as ``...``), for texts
    that go to a log line, a span or an exception's own message.
    """
    try:
        text = str(exc)
        if not issubclass(type(text), str):  # pragma: no cover - str() refuses non-strs
            return None
        plain = text if type(text) is str else str.__str__(text)
    except Exception:  # the exception's own __str__: whatever it does stays here
        return None
    if limit is not None and len(plain) > limit:
        plain = plain[: max(limit - 3, 0)] + "..."
    return valid_text(plain)


def valid_str(value: Any) -> Any:
    """A str (or str subclass) as an exact str of valid Unicode (see ``valid_text``),
    read from its storage; anything else as it is, for a validator to judge. An attrs
    converter for the texts a person or a hook gives (a reason, who decided)."""
    if issubclass(type(value), str):
        return valid_text(value if type(value) is str else str.__str__(value))
    return value


def reportable(exc: Exception) -> Exception:
    """``exc`` itself when ``repr()`` can print it, else a RuntimeError that says what it
    was (to be raised ``from exc``, which keeps it as ``__cause__``).

    trio prints ``repr()`` of an exception that leaves a task of a nursery (the reason
    it cancels the siblings with): one whose ``__repr__`` raises or returns no str turns
    into a TrioInternalError there, so user code's exception is checked before it
    crosses a task's edge."""
    try:
        shown = repr(exc)
        if type(shown) is str:
            return exc
    except Exception:  # the exception's own __repr__
        pass
    return RuntimeError(f"{describe_exception_text(exc, limit=MESSAGE_LIMIT)} (its repr() failed)")


def type_name(value: object) -> str:
    """The name of ``value``'s class, read from type's own slot (a metaclass cannot
    answer for it), as valid text."""
    name: str = _TYPE_NAME.__get__(type(value))
    return valid_text(name if type(name) is str else str.__str__(name))


_TYPE_NAME: Final = type.__dict__["__name__"]


def describe_exception_text(exc: BaseException, *, limit: int | None = None) -> str:
    """``ExcType: message``, ``ExcType`` when the message is empty, or
    ``ExcType (its message could not be read)``. Never raises."""
    name = type_name(exc)
    message = exception_message(exc, limit=limit)
    if message is None:
        return f"{name} (its message could not be read)"
    return f"{name}: {message}" if message else name


def leaf_exceptions(exc: BaseException) -> list[BaseException]:
    if issubclass(type(exc), BaseExceptionGroup):
        # The group's own storage: a subclass's exceptions property is the thrower's code.
        inner: tuple[BaseException, ...] = _GROUP_MEMBERS.__get__(exc)
        return [leaf for member in inner for leaf in leaf_exceptions(member)]
    return [exc]


_GROUP_MEMBERS: Final = BaseExceptionGroup.__dict__["exceptions"]


def describe_exception(exc: BaseException, *, limit: int | None = None) -> str:
    """``ExcType: message``; an exception group by its leaves, joined with ``; ``;
    each message cut at ``limit`` characters when given.

    Never raises: an exception whose ``__str__`` raises or returns no str is named by
    its type, ``ExcType (its message could not be read)``; the text is valid Unicode."""
    return "; ".join(describe_exception_text(leaf, limit=limit) for leaf in leaf_exceptions(exc))

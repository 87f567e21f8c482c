"""Text made valid where it enters (satsuma._text): lone surrogates replaced, surrogate
pairs joined, valid text untouched (issue 29, item 4's class)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma._text import is_valid_text, valid_text

# Any code point, surrogates included (hypothesis leaves category Cs out by default).
ANY_TEXT = st.text(st.characters(codec=None, categories=None, exclude_categories=()))
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reference(text: str) -> str:
    """What valid_text must give, written out code point by code point."""
    out: list[str] = []
    index = 0
    while index < len(text):
        point = ord(text[index])
        if 0xD800 <= point <= 0xDBFF and index + 1 < len(text):
            low = ord(text[index + 1])
            if 0xDC00 <= low <= 0xDFFF:
                out.append(chr(0x10000 + ((point - 0xD800) << 10) + (low - 0xDC00)))
                index += 2
                continue
        out.append("\ufffd" if 0xD800 <= point <= 0xDFFF else text[index])
        index += 1
    return "".join(out)


@settings(max_examples=500)
@given(ANY_TEXT)
def test_valid_text_is_the_reference_and_keeps_valid_text_as_it_is(text: str) -> None:
    made = valid_text(text)
    assert _encodes(made)
    assert is_valid_text(text) is _encodes(text)
    assert made == _reference(text)
    if _encodes(text):
        assert made is text  # the same object: no copy on the common path


@given(st.text(), SURROGATES, st.text())
def test_a_lone_surrogate_is_replaced_where_it_stands(before: str, bad: str, after: str) -> None:
    # st.text() holds no surrogates: ``bad`` has no partner.
    assert valid_text(before + bad + after) == before + "\ufffd" + after


def test_pairs_are_joined_and_lone_halves_replaced() -> None:
    assert valid_text("a\ud83d\ude00b") == "a\U0001f600b"
    assert valid_text("\ude00\ud83d") == "\ufffd\ufffd"
    assert valid_text("x\ud800") == "x\ufffd"
    assert valid_text("\udfff" * 3) == "\ufffd" * 3

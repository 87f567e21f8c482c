"""The results gate copies common content blocks in one pass: what it gives (the copy,
or the problem) is exactly what the full check and deep copy give, on random blocks."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma.tools._gate import check_content, check_content_fully

# The edges first, so that they come often: ints at the quick path's bound and past the
# digit limit, lone surrogates and a pair, NaN and infinities.
edges = st.sampled_from(
    [
        10**18 - 1,
        10**18,
        -(10**18),
        10**5000,
        math.nan,
        math.inf,
        "\ud800",
        "a\udc00b",
        "\ud83d\ude00",
    ]
)
scalars = st.one_of(
    edges, st.none(), st.booleans(), st.integers(-9, 9), st.floats(), st.text(max_size=4)
)
keys = st.one_of(st.sampled_from(["type", "text", "source", "cache_control"]), st.text(max_size=3))
members = st.one_of(scalars, st.lists(scalars, max_size=2), st.dictionaries(keys, scalars))
sources = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["base64", "url", "file"]),
            "media_type": st.sampled_from(["image/png", "image/tiff", 3]),
            "data": st.one_of(st.text(max_size=4), st.binary(max_size=2)),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("url"), "url": st.one_of(st.text(max_size=4), st.none())}
    ),
    st.dictionaries(keys, members, max_size=3),
    members,
)
texts = st.one_of(st.text(max_size=4), edges)
blocks = st.one_of(
    # The shapes the quick path takes, often with one scalar it must refuse.
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": texts}, optional={"x": scalars, "\udfff": scalars}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("image"),
            "source": st.fixed_dictionaries(
                {
                    "type": st.just("base64"),
                    "media_type": st.sampled_from(["image/png", "image/tiff"]),
                    "data": texts,
                },
                optional={"x": scalars},
            ),
        },
        optional={"x": scalars},
    ),
    # And everything else.
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": scalars}, optional={"x": members, "y": members}
    ),
    st.fixed_dictionaries(
        {"type": st.just("image"), "source": sources}, optional={"cache_control": members}
    ),
    st.dictionaries(keys, members, max_size=3),
    members,
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(blocks, max_size=3))
def test_the_quick_copy_is_the_full_check(content: list[Any]) -> None:
    assert check_content(content) == check_content_fully(content)


@pytest.mark.parametrize(
    "odd",
    [math.nan, -math.inf, 10**5000, 10**18, "\ud800", [1], {"a": 1}],
    ids=["nan", "-inf", "5001 digits", "10**18", "surrogate", "list", "dict"],
)
def test_one_odd_member_takes_the_full_check(odd: object) -> None:
    for content in (
        [{"type": "text", "text": "a", "x": odd}],
        [{"type": "text", "text": "a"}, {"type": "text", "text": odd}],
        [{"type": "text", "text": "a", "\udfff": odd}],  # a lone surrogate in a key too
        [{"type": "image", "source": {"type": "url", "url": "u", "x": odd}}],
    ):
        assert check_content(content) == check_content_fully(content)


def test_common_blocks_are_copied_not_shared() -> None:
    source = {"type": "base64", "media_type": "image/png", "data": "aGk="}
    given = [{"type": "text", "text": "hi"}, {"type": "image", "source": source}]
    copied, problem = check_content(given)
    assert problem is None and copied == given
    assert isinstance(copied, list)
    assert copied[0] is not given[0] and copied[1]["source"] is not source

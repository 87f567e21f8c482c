"""The date_resolver tool: resolve_date's grammar, its edges, and calls through the runner."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satsuma.testing import run_tool
from satsuma.tools.builtin._dates import DateResolver, parse_today, resolve_date

D = datetime.date
TODAY = D(2026, 11, 22)  # a Sunday: this week runs Monday 16 to Sunday 22

SETTINGS = settings(max_examples=200, deadline=None)

CASES = [
    # fixed words
    ("today", D(2026, 11, 22)),
    ("now", D(2026, 11, 22)),
    ("tomorrow", D(2026, 11, 23)),
    ("yesterday", D(2026, 11, 21)),
    ("day after tomorrow", D(2026, 11, 24)),
    ("the day after tomorrow", D(2026, 11, 24)),
    ("day before yesterday", D(2026, 11, 20)),
    # in N units / N units from now / later / ago
    ("in 0 days", D(2026, 11, 22)),
    ("in 1 day", D(2026, 11, 23)),
    ("in 3 days", D(2026, 11, 25)),
    ("in 10 days", D(2026, 11, 22) + datetime.timedelta(days=10)),
    ("in 100 days", D(2027, 3, 2)),
    ("in a week", D(2026, 11, 29)),
    ("in 2 weeks", D(2026, 12, 6)),
    ("in a fortnight", D(2026, 12, 6)),
    ("in two fortnights", D(2026, 12, 20)),
    ("in 1 month", D(2026, 12, 22)),
    ("in 3 months", D(2027, 2, 22)),
    ("in twelve months", D(2027, 11, 22)),
    ("in 2 years", D(2028, 11, 22)),
    ("in an year", D(2027, 11, 22)),
    ("3 days from now", D(2026, 11, 25)),
    ("six months from now", D(2027, 5, 22)),
    ("5 days later", D(2026, 11, 27)),
    ("three weeks later", D(2026, 12, 13)),
    ("3 days ago", D(2026, 11, 19)),
    ("eleven days ago", D(2026, 11, 11)),
    ("30 days ago", D(2026, 10, 23)),
    ("2 weeks ago", D(2026, 11, 8)),
    ("a fortnight ago", D(2026, 11, 8)),
    ("a month ago", D(2026, 10, 22)),
    ("a year ago", D(2025, 11, 22)),
    # next / last / this / bare weekdays
    ("next friday", D(2026, 11, 27)),
    ("next monday", D(2026, 11, 23)),
    ("next saturday", D(2026, 11, 28)),
    ("next sunday", D(2026, 11, 29)),
    ("next thu", D(2026, 11, 26)),
    ("last friday", D(2026, 11, 20)),
    ("last monday", D(2026, 11, 16)),
    ("last saturday", D(2026, 11, 21)),
    ("last sunday", D(2026, 11, 15)),
    ("last thur", D(2026, 11, 19)),
    ("this monday", D(2026, 11, 16)),
    ("this wed", D(2026, 11, 18)),
    ("this friday", D(2026, 11, 20)),
    ("this sunday", D(2026, 11, 22)),
    ("friday", D(2026, 11, 27)),
    ("sunday", D(2026, 11, 29)),
    ("on tuesday", D(2026, 11, 24)),
    ("mon", D(2026, 11, 23)),
    ("tue", D(2026, 11, 24)),
    ("tues", D(2026, 11, 24)),
    ("wed", D(2026, 11, 25)),
    ("thurs", D(2026, 11, 26)),
    ("fri", D(2026, 11, 27)),
    ("sat", D(2026, 11, 28)),
    ("sun", D(2026, 11, 29)),
    ("on next friday", D(2026, 11, 27)),
    # next / last week, month, year
    ("next week", D(2026, 11, 29)),
    ("last week", D(2026, 11, 15)),
    ("next month", D(2026, 12, 22)),
    ("last month", D(2026, 10, 22)),
    ("next year", D(2027, 11, 22)),
    ("last year", D(2025, 11, 22)),
    # start / beginning / end of a week, month, year
    ("start of week", D(2026, 11, 16)),
    ("start of this week", D(2026, 11, 16)),
    ("end of week", D(2026, 11, 22)),
    ("end of this week", D(2026, 11, 22)),
    ("start of next week", D(2026, 11, 23)),
    ("end of next week", D(2026, 11, 29)),
    ("beginning of last week", D(2026, 11, 9)),
    ("end of last week", D(2026, 11, 15)),
    ("beginning of month", D(2026, 11, 1)),
    ("start of this month", D(2026, 11, 1)),
    ("end of month", D(2026, 11, 30)),
    ("end of the month", D(2026, 11, 30)),
    ("start of next month", D(2026, 12, 1)),
    ("end of next month", D(2026, 12, 31)),
    ("start of last month", D(2026, 10, 1)),
    ("end of last month", D(2026, 10, 31)),
    ("start of year", D(2026, 1, 1)),
    ("end of this year", D(2026, 12, 31)),
    ("beginning of next year", D(2027, 1, 1)),
    ("end of next year", D(2027, 12, 31)),
    ("end of last year", D(2025, 12, 31)),
    # ISO dates
    ("2026-12-01", D(2026, 12, 1)),
    ("2024-02-29", D(2024, 2, 29)),
    # case, whitespace and a trailing period
    ("  Next   FRIDAY. ", D(2026, 11, 27)),
    ("Tomorrow.", D(2026, 11, 23)),
    ("IN 3\tDAYS", D(2026, 11, 25)),
    ("End Of Month.", D(2026, 11, 30)),
]


def test_today_is_a_sunday() -> None:
    assert TODAY.weekday() == 6


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_resolves_each_form(expression: str, expected: datetime.date) -> None:
    assert resolve_date(expression, TODAY) == expected


@pytest.mark.parametrize(
    ("expression", "today", "expected"),
    [
        ("in 1 month", D(2026, 1, 31), D(2026, 2, 28)),
        ("in a month", D(2024, 1, 31), D(2024, 2, 29)),
        ("a month ago", D(2026, 3, 31), D(2026, 2, 28)),
        ("next month", D(2026, 3, 31), D(2026, 4, 30)),
        ("last month", D(2026, 10, 31), D(2026, 9, 30)),
        ("next month", D(2026, 12, 31), D(2027, 1, 31)),
        ("last month", D(2026, 1, 15), D(2025, 12, 15)),
        ("in 3 months", D(2026, 5, 31), D(2026, 8, 31)),
        ("next year", D(2024, 2, 29), D(2025, 2, 28)),
        ("last year", D(2024, 2, 29), D(2023, 2, 28)),
        ("in 4 years", D(2024, 2, 29), D(2028, 2, 29)),
        ("end of month", D(2024, 2, 10), D(2024, 2, 29)),
        ("end of next month", D(2026, 1, 31), D(2026, 2, 28)),
        ("start of next week", D(2026, 12, 30), D(2027, 1, 4)),
    ],
)
def test_months_clamp_to_the_month_end(
    expression: str, today: datetime.date, expected: datetime.date
) -> None:
    assert resolve_date(expression, today) == expected


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("blah", "Could not understand date expression: 'blah'. Try: today, tomorrow"),
        ("", "Could not understand date expression: ''."),
        ("   ", "Could not understand date expression: '   '."),
        ("next fridays", "Could not understand"),
        ("in -3 days", "Could not understand"),
        ("in 3 bananas", "Could not understand"),
        ("tomorrow tomorrow", "Could not understand"),
        ("in 3", "Could not understand"),
        ("2026-02-30", "Not a valid date: '2026-02-30' (day is out of range for month)"),
        ("2026-13-01", "Not a valid date: '2026-13-01'"),
        ("in 10001 days", "Number too large in date expression: 'in 10001 days'"),
        ("in 99999999999999999999999999 days", "Number too large"),
        ("in 10000 years", "gives a date outside the supported range"),
    ],
)
def test_bad_expressions_raise_a_one_line_value_error(expression: str, fragment: str) -> None:
    with pytest.raises(ValueError) as caught:
        resolve_date(expression, TODAY)
    message = str(caught.value)
    assert fragment in message
    assert repr(expression) in message
    assert "\n" not in message


def test_a_newline_in_the_expression_keeps_the_message_on_one_line() -> None:
    with pytest.raises(ValueError, match="Could not understand") as caught:
        resolve_date("next\nfriday\nplease", TODAY)
    assert "\n" not in str(caught.value)


def test_a_long_expression_is_shortened_in_the_message() -> None:
    with pytest.raises(ValueError, match="Could not understand") as caught:
        resolve_date("x" * 10_000, TODAY)
    assert len(str(caught.value)) < 400


@pytest.mark.parametrize(
    ("expression", "today"),
    [
        ("tomorrow", datetime.date.max),
        ("yesterday", datetime.date.min),
        ("this sunday", datetime.date.max),  # 9999-12-31 is a Friday
        ("next monday", datetime.date.max),
        ("last friday", datetime.date.min),
        ("end of next week", datetime.date.max),
        ("start of last month", datetime.date.min),
        ("start of next year", datetime.date.max),
        ("in 10000 days", D(9990, 1, 1)),
        ("10000 months ago", D(100, 1, 1)),
    ],
)
def test_leaving_the_calendar_is_a_value_error(expression: str, today: datetime.date) -> None:
    with pytest.raises(ValueError, match="outside the supported range") as caught:
        resolve_date(expression, today)
    assert repr(expression) in str(caught.value)


def test_the_largest_count_is_accepted() -> None:
    assert resolve_date("in 10000 days", TODAY) == TODAY + datetime.timedelta(days=10_000)
    assert resolve_date("10000 weeks ago", TODAY) == TODAY - datetime.timedelta(weeks=10_000)


# --- properties -------------------------------------------------------------------------

DATES = st.dates(min_value=D(1000, 1, 1), max_value=D(8000, 12, 31))
COUNTS = st.integers(min_value=0, max_value=10_000)
WEEKDAYS = {
    "monday": 0,
    "mon": 0,
    "tuesday": 1,
    "tues": 1,
    "wednesday": 2,
    "wed": 2,
    "thursday": 3,
    "thurs": 3,
    "friday": 4,
    "fri": 4,
    "saturday": 5,
    "sat": 5,
    "sunday": 6,
    "sun": 6,
}
WEEKDAY_NAMES = st.sampled_from(sorted(WEEKDAYS))


@SETTINGS
@given(today=DATES, n=COUNTS)
def test_in_n_days_and_n_days_ago(today: datetime.date, n: int) -> None:
    assert resolve_date(f"in {n} days", today) == today + datetime.timedelta(days=n)
    assert resolve_date(f"{n} days from now", today) == today + datetime.timedelta(days=n)
    assert resolve_date(f"{n} days ago", today) == today - datetime.timedelta(days=n)


@SETTINGS
@given(today=DATES, name=WEEKDAY_NAMES)
def test_next_weekday_is_one_to_seven_days_ahead(today: datetime.date, name: str) -> None:
    for expression in (f"next {name}", name, f"on {name}"):
        result = resolve_date(expression, today)
        assert 1 <= (result - today).days <= 7
        assert result.weekday() == WEEKDAYS[name]


@SETTINGS
@given(today=DATES, name=WEEKDAY_NAMES)
def test_last_weekday_is_one_to_seven_days_back(today: datetime.date, name: str) -> None:
    result = resolve_date(f"last {name}", today)
    assert 1 <= (today - result).days <= 7
    assert result.weekday() == WEEKDAYS[name]


@SETTINGS
@given(today=DATES, name=WEEKDAY_NAMES)
def test_this_weekday_is_in_the_same_iso_week(today: datetime.date, name: str) -> None:
    result = resolve_date(f"this {name}", today)
    assert result.isocalendar()[:2] == today.isocalendar()[:2]
    assert result.weekday() == WEEKDAYS[name]


@SETTINGS
@given(today=DATES, months=st.integers(min_value=0, max_value=1200))
def test_months_keep_the_day_or_clamp_it(today: datetime.date, months: int) -> None:
    later = resolve_date(f"in {months} months", today)
    assert (later.year - today.year) * 12 + later.month - today.month == months
    next_day = later + datetime.timedelta(days=1)
    assert later.day == today.day or (later.day < today.day and next_day.day == 1)


@SETTINGS
@given(today=DATES)
def test_week_boundaries_are_monday_and_sunday(today: datetime.date) -> None:
    start, end = resolve_date("start of week", today), resolve_date("end of week", today)
    assert start.weekday() == 0 and end.weekday() == 6
    assert start <= today <= end and (end - start).days == 6


# --- parse_today --------------------------------------------------------------------------


def test_parse_today() -> None:
    assert parse_today("2026-11-22") == TODAY
    assert parse_today(" 2026-11-22 ") == TODAY
    assert parse_today(None) == datetime.date.today()


@pytest.mark.parametrize("text", ["", "tomorrow", "22/11/2026", "20261122", "2026-02-30"])
def test_parse_today_refuses_anything_but_an_iso_date(text: str) -> None:
    with pytest.raises(ValueError, match=r"^today must be an ISO date \(YYYY-MM-DD\), got: "):
        parse_today(text)


# --- through the runner -------------------------------------------------------------------


async def test_tool_answers_with_the_iso_date_and_weekday() -> None:
    outcome = await run_tool(DateResolver, {"expression": "next friday", "today": "2026-11-22"})
    assert not outcome.is_error
    assert outcome.error_kind is None
    assert outcome.content == "2026-11-27 (Friday)"


async def test_tool_counts_from_the_given_today() -> None:
    first = await run_tool(DateResolver, {"expression": "tomorrow", "today": "2024-02-28"})
    second = await run_tool(DateResolver, {"expression": "tomorrow", "today": "2024-02-29"})
    assert first.content == "2024-02-29 (Thursday)"
    assert second.content == "2024-03-01 (Friday)"


async def test_tool_defaults_today_to_the_current_date() -> None:
    before = datetime.date.today()
    outcome = await run_tool(DateResolver, {"expression": "today"})
    after = datetime.date.today()  # the clock may pass midnight during the call
    assert not outcome.is_error
    assert isinstance(outcome.content, str)
    assert outcome.content[:10] in (before.isoformat(), after.isoformat())


async def test_tool_refuses_a_bad_today() -> None:
    outcome = await run_tool(DateResolver, {"expression": "tomorrow", "today": "next week"})
    assert outcome.is_error
    assert outcome.error_kind == "failed"
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: today must be an ISO date")


async def test_tool_refuses_an_unknown_expression() -> None:
    outcome = await run_tool(DateResolver, {"expression": "when pigs fly"})
    assert outcome.is_error
    assert isinstance(outcome.content, str)
    assert outcome.content.startswith("Error: Could not understand date expression")
    assert "'when pigs fly'" in outcome.content


def test_tool_needs_no_capability() -> None:
    assert DateResolver.schema()["name"] == "date_resolver"
    assert DateResolver.__satsuma_definition__ is not None
    assert DateResolver.__satsuma_definition__.capabilities == frozenset()

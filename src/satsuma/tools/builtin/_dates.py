"""The ``date_resolver`` tool: a relative date expression ("next friday", "in 3 weeks",
"end of month") turned into a calendar date.

Models are unreliable at calendar arithmetic; this gives them an exact answer. The parsing
is a small, pure function (``resolve_date``) over a fixed grammar of English phrases, so
the same expression and reference date always give the same date.
"""

from __future__ import annotations

import calendar
import datetime
import re
from typing import Any, Final

from .. import Tool, ToolContext

__all__ = ["DateResolver", "parse_today", "resolve_date"]

_SUPPORTED: Final = (
    "today, tomorrow, yesterday, next friday, last monday, this friday, in 3 days, "
    "2 weeks ago, next month, last year, end of month, 2026-12-01"
)
_MAX_COUNT: Final = 10_000
_SHOWN_CHARS: Final = 100  # how much of a long expression an error message repeats

# Fixed English names, so the answer never depends on the process's locale.
_WEEKDAY_NAMES: Final = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)
_WEEKDAYS: Final[dict[str, int]] = {
    "monday": 0,
    "mon": 0,
    "tuesday": 1,
    "tue": 1,
    "tues": 1,
    "wednesday": 2,
    "wed": 2,
    "thursday": 3,
    "thu": 3,
    "thur": 3,
    "thurs": 3,
    "friday": 4,
    "fri": 4,
    "saturday": 5,
    "sat": 5,
    "sunday": 6,
    "sun": 6,
}
_FIXED: Final[dict[str, int]] = {
    "today": 0,
    "now": 0,
    "tomorrow": 1,
    "yesterday": -1,
    "day after tomorrow": 2,
    "the day after tomorrow": 2,
    "day before yesterday": -2,
    "the day before yesterday": -2,
}
_NUMBER_WORDS: Final[dict[str, int]] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
# unit -> (days, months) per one unit
_UNITS: Final[dict[str, tuple[int, int]]] = {
    "day": (1, 0),
    "week": (7, 0),
    "fortnight": (14, 0),
    "month": (0, 1),
    "year": (0, 12),
}

_ISO: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_IN: Final = re.compile(r"in (\S+) ([a-z]+)")
_OFFSET: Final = re.compile(r"(\S+) ([a-z]+) (ago|from now|later)")
_WEEKDAY: Final = re.compile(r"(?:on )?(?:(next|last|this) )?([a-z]+)")
_NEXT_LAST: Final = re.compile(r"(next|last) (week|month|year)")
_BOUNDARY: Final = re.compile(
    r"(start|beginning|end) of (?:(this|next|last|the) )?(week|month|year)"
)


def resolve_date(expression: str, today: datetime.date) -> datetime.date:
    """Resolve a date expression against a reference date.

    Matching ignores case, surrounding whitespace and a trailing period, and collapses
    runs of whitespace. The forms understood:

    * ``today``/``now``, ``tomorrow``, ``yesterday``, ``day after tomorrow``,
      ``day before yesterday``;
    * ``in N units``, ``N units from now``, ``N units later``, ``N units ago``, where N is
      digits (at most 10,000), a number word from one to twelve, or ``a``/``an``, and the
      unit is day, week, fortnight, month or year (singular or plural). Months and years
      move by calendar months, clamping the day to the month's end;
    * ``next <weekday>`` (the first one strictly after today), ``last <weekday>`` (the
      last one strictly before today), ``this <weekday>`` (in the current Monday-to-Sunday
      week, possibly in the past) and a bare ``<weekday>`` or ``on <weekday>`` (as
      ``next``); weekdays may be abbreviated (mon, tue, tues, wed, thu, thur, thurs, fri,
      sat, sun);
    * ``next week``/``last week`` (seven days on or back), ``next month``/``last month``
      and ``next year``/``last year`` (calendar months, clamped);
    * ``start of``/``beginning of``/``end of`` followed by an optional ``this``, ``next``,
      ``last`` or ``the`` and then week, month or year (weeks run Monday to Sunday);
    * an ISO date, ``YYYY-MM-DD``, which is returned as it is.

    Args:
        expression: The expression to resolve.
        today: The date the expression is relative to.

    Returns:
        The date the expression names.

    Raises:
        ValueError: With a one-line message naming the expression, if it is not
            understood, names an invalid ISO date, has a count above 10,000 or lands
            outside the years 1 to 9999.
    """
    text = " ".join(expression.strip().lower().removesuffix(".").split())
    shown = _shown(expression)

    if text in _FIXED:
        return _add_days(today, _FIXED[text], shown)

    if match := _ISO.fullmatch(text):
        year, month, day = (int(part) for part in match.groups())
        try:
            return datetime.date(year, month, day)
        except ValueError as exc:
            raise ValueError(f"Not a valid date: {shown} ({exc}).") from None

    relative = _IN.fullmatch(text)
    sign = 1
    if relative is None and (relative := _OFFSET.fullmatch(text)) is not None:
        sign = -1 if relative[3] == "ago" else 1
    if relative is not None:
        unit = _UNITS.get(relative[2].removesuffix("s"))
        count = None if unit is None else _count(relative[1], shown)
        if count is not None and unit is not None:
            days, months = unit
            moved = _add_months(today, sign * count * months, shown)
            return _add_days(moved, sign * count * days, shown)

    if (match := _WEEKDAY.fullmatch(text)) and match[2] in _WEEKDAYS:
        return _weekday(today, match[1], _WEEKDAYS[match[2]], shown)

    if match := _NEXT_LAST.fullmatch(text):
        step = 1 if match[1] == "next" else -1
        if match[2] == "week":
            return _add_days(today, 7 * step, shown)
        return _add_months(today, step if match[2] == "month" else 12 * step, shown)

    if match := _BOUNDARY.fullmatch(text):
        step = {"next": 1, "last": -1}.get(match[2] or "this", 0)
        return _boundary(today, match[1] == "end", step, match[3], shown)

    raise ValueError(f"Could not understand date expression: {shown}. Try: {_SUPPORTED}")


def parse_today(text: str | None) -> datetime.date:
    """Read the reference date of a call.

    Args:
        text: An ISO date (``YYYY-MM-DD``), or None for the current local date.

    Returns:
        The reference date.

    Raises:
        ValueError: If ``text`` is not a valid ISO date.
    """
    if text is None:
        return datetime.date.today()
    match = _ISO.fullmatch(text.strip())
    if match is not None:
        try:
            return datetime.date(*(int(part) for part in match.groups()))
        except ValueError as exc:
            raise ValueError(
                f"today must be an ISO date (YYYY-MM-DD), got: {_shown(text)} ({exc})"
            ) from None
    raise ValueError(f"today must be an ISO date (YYYY-MM-DD), got: {_shown(text)}")


class DateResolver(Tool):
    """Resolves relative date expressions ("next friday", "in 3 weeks") to ISO dates."""

    name = "date_resolver"
    description = (
        "Turn a date expression into an exact calendar date, counted from today (or from "
        "the given 'today'). Understands: today, tomorrow, yesterday, day after tomorrow, "
        "day before yesterday; 'in 3 days', '2 weeks ago', 'a month from now' (units: day, "
        "week, fortnight, month, year); 'next friday' and a bare 'friday' (the first one "
        "after today), 'last friday' (the last one before today), 'this friday' (in the "
        "current Monday-to-Sunday week); next/last week, month or year; 'start of next "
        "week', 'end of month', 'beginning of last year'; and ISO dates (YYYY-MM-DD). "
        "Answers with the ISO date and its weekday, e.g. '2026-11-27 (Friday)'."
    )
    parameters = {
        "expression": {
            "type": "string",
            "required": True,
            "description": "The date expression, e.g. 'next friday', 'in 3 weeks', 'end of month'",
        },
        "today": {
            "type": "string",
            "description": "The reference date, YYYY-MM-DD (default: today's date)",
        },
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
        """Resolve ``args["expression"]`` against ``args["today"]`` (default: today).

        Args:
            args: The checked arguments.
            ctx: The call's context (unused).

        Returns:
            ``("ok", "YYYY-MM-DD (Weekday)")``, or ``("error", reason)``.
        """
        try:
            # An empty "today" counts as not given: models sometimes send "" for optionals.
            today = parse_today(args.get("today") or None)
            date = resolve_date(args["expression"], today)
        except ValueError as exc:
            return "error", str(exc)
        return "ok", f"{date.isoformat()} ({_WEEKDAY_NAMES[date.weekday()]})"


def _shown(expression: str) -> str:
    """The expression as an error message repeats it: quoted, escaped, shortened."""
    if len(expression) > _SHOWN_CHARS:
        return repr(expression[:_SHOWN_CHARS] + "...")
    return repr(expression)


def _out_of_range(shown: str) -> ValueError:
    return ValueError(
        f"Date expression {shown} gives a date outside the supported range "
        f"({datetime.date.min.isoformat()} to {datetime.date.max.isoformat()})."
    )


def _count(token: str, shown: str) -> int | None:
    """The number a count token means, or None if it is no number."""
    if token in _NUMBER_WORDS:
        return _NUMBER_WORDS[token]
    if not token.isascii() or not token.isdigit():
        return None
    if len(token) > len(str(_MAX_COUNT)) or int(token) > _MAX_COUNT:
        raise ValueError(f"Number too large in date expression: {shown} (at most {_MAX_COUNT:,}).")
    return int(token)


def _add_days(date: datetime.date, days: int, shown: str) -> datetime.date:
    try:
        return date + datetime.timedelta(days=days)
    except OverflowError:
        raise _out_of_range(shown) from None


def _add_months(date: datetime.date, months: int, shown: str) -> datetime.date:
    """Move by calendar months, clamping the day to the last day of the new month."""
    year, month0 = divmod(date.year * 12 + date.month - 1 + months, 12)
    if not datetime.MINYEAR <= year <= datetime.MAXYEAR:
        raise _out_of_range(shown)
    month = month0 + 1
    return datetime.date(year, month, min(date.day, calendar.monthrange(year, month)[1]))


def _weekday(
    today: datetime.date, qualifier: str | None, weekday: int, shown: str
) -> datetime.date:
    if qualifier == "this":
        return _add_days(today, weekday - today.weekday(), shown)
    if qualifier == "last":
        return _add_days(today, -((today.weekday() - weekday) % 7 or 7), shown)
    return _add_days(today, (weekday - today.weekday()) % 7 or 7, shown)  # next, or bare


def _boundary(today: datetime.date, end: bool, step: int, unit: str, shown: str) -> datetime.date:
    """The first or last day of this week, month or year, or of the one ``step`` away."""
    if unit == "week":
        monday = _add_days(today, 7 * step - today.weekday(), shown)
        return _add_days(monday, 6, shown) if end else monday
    if unit == "month":
        first = _add_months(today.replace(day=1), step, shown)
        if end:
            return first.replace(day=calendar.monthrange(first.year, first.month)[1])
        return first
    year = today.year + step
    if not datetime.MINYEAR <= year <= datetime.MAXYEAR:
        raise _out_of_range(shown)
    return datetime.date(year, 12, 31) if end else datetime.date(year, 1, 1)

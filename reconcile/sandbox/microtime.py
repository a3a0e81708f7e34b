"""metav1.MicroTime on the wire: `2006-01-02T15:04:05.000000Z07:00`, and nothing else.

Events (eventTime, series.lastObservedTime) and Leases (acquireTime, renewTime) carry
MicroTimes. The API server decodes them with Go's time.Parse and that layout before it
does anything else, so a timestamp without its six fractional digits is a 400 whose
message is Go's ParseError, which `parse` reproduces; what it accepts is stored in UTC,
as MicroTime.MarshalJSON writes it back.
"""

from __future__ import annotations

import calendar
import datetime
from typing import Final

from reconcile.kube.labels import go_quote

LAYOUT: Final = "2006-01-02T15:04:05.000000Z07:00"


class MicroTimeError(ValueError):
    """time.ParseError's text: `parsing time "V" as "LAYOUT": cannot parse "X" as "Y"`."""


def _bad(value: str, rest: str, element: str) -> MicroTimeError:
    return MicroTimeError(
        f"parsing time {go_quote(value)} as {go_quote(LAYOUT)}: "
        f"cannot parse {go_quote(rest)} as {go_quote(element)}"
    )


def _out_of_range(value: str, what: str) -> MicroTimeError:
    return MicroTimeError(f"parsing time {go_quote(value)}: {what} out of range")


def _getnum(text: str, fixed: bool) -> tuple[int, str] | None:
    """Go's getnum: one or two leading digits (exactly two when fixed)."""
    if not text[:1].isdigit() or not text[:1].isascii():
        return None
    if not text[1:2].isdigit() or not text[1:2].isascii():
        return None if fixed else (int(text[0]), text[1:])
    return int(text[:2]), text[2:]


def _atoi(text: str) -> int | None:
    sign = 1
    if text[:1] in ("+", "-"):
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    if not text or not (text.isascii() and text.isdigit()):
        return None
    return sign * int(text)


def parse(value: str) -> str:
    """The MicroTime as the API server stores it (UTC); MicroTimeError as time.Parse fails."""
    rest = value
    fields: dict[str, int] = {}
    # (literal before the element, element, name, fixed width)
    for literal, element, name, fixed in (
        ("", "2006", "year", True),
        ("-", "01", "month", True),
        ("-", "02", "day", True),
        ("T", "15", "hour", False),
        (":", "04", "minute", True),
        (":", "05", "second", True),
    ):
        for i, char in enumerate(literal):
            if not rest or rest[0] != char:
                raise _bad(value, rest, literal[i:])
            rest = rest[1:]
        if name == "year":
            year = _atoi(rest[:4]) if len(rest) >= 4 and rest[:1].isdigit() else None
            if year is None:
                raise _bad(value, rest, element)
            fields[name], rest = year, rest[4:]
            continue
        found = _getnum(rest, fixed)
        if found is None:
            raise _bad(value, rest, element)
        number, rest = found
        limit = {"month": 12, "hour": 23, "minute": 59, "second": 59}.get(name)
        low = 1 if name == "month" else 0
        if limit is not None and not low <= number <= limit:
            raise _out_of_range(value, name)
        fields[name] = number
    # ".000000": a period (or comma) and exactly six digits.
    if len(rest) < 7 or rest[0] not in ".,":
        raise _bad(value, rest, ".000000")
    micros = _atoi(rest[1:7])
    if micros is None:
        raise _bad(value, rest, ".000000")
    if micros < 0:
        raise _out_of_range(value, "fractional second")
    rest = rest[7:]
    # "Z07:00": Z, or a sign, two digits, a colon and two digits.
    offset = 0
    if rest[:1] == "Z":
        rest = rest[1:]
    else:
        zone = rest
        if len(rest) < 6 or rest[3] != ":":
            raise _bad(value, zone, "Z07:00")
        hours, minutes = _getnum(rest[1:3], True), _getnum(rest[4:6], True)
        if hours is None or minutes is None or rest[0] not in "+-":
            raise _bad(value, zone, "Z07:00")
        if hours[0] > 24:
            raise _out_of_range(value, "time zone offset hour")
        if minutes[0] > 60:
            raise _out_of_range(value, "time zone offset minute")
        offset = (hours[0] * 60 + minutes[0]) * (-1 if rest[0] == "-" else 1)
        rest = rest[6:]
    if rest:
        raise MicroTimeError(f"parsing time {go_quote(value)}: extra text: {go_quote(rest)}")
    year, month, day = fields["year"], fields["month"], fields["day"]
    # Year 0 is a leap year in Go's proleptic calendar, as 2000 is.
    if not 1 <= day <= calendar.monthrange(year or 2000, month)[1]:
        raise _out_of_range(value, "day")
    local = datetime.datetime(
        max(year, 1), month, day, fields["hour"], fields["minute"], fields["second"], micros
    )
    utc = local - datetime.timedelta(minutes=offset)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

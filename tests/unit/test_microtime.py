"""MicroTime parsing: what a real v1.36 API server answered for each value (a Lease's
renewTime), the stored value or the text of the 400 after `cannot be handled as a Lease: `."""

from __future__ import annotations

import pytest

from reconcile.sandbox import microtime

LAYOUT = '"2006-01-02T15:04:05.000000Z07:00"'


@pytest.mark.parametrize(
    ("value", "answer"),
    [
        ("2026-12-01T08:00:00.000000Z", "2026-12-01T08:00:00.000000Z"),
        ("2026-12-01T08:00:00.123456+02:00", "2026-12-01T06:00:00.123456Z"),
        ("2026-12-01T8:00:00.000000Z", "2026-12-01T08:00:00.000000Z"),
        ("2026-12-01T08:00:00,123456Z", "2026-12-01T08:00:00.123456Z"),
    ],
)
def test_accepted_and_stored_in_utc(value: str, answer: str) -> None:
    assert microtime.parse(value) == answer


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2026-12-01T08:00:00Z", f'as {LAYOUT}: cannot parse "Z" as ".000000"'),
        ("yesterday", f'as {LAYOUT}: cannot parse "yesterday" as "2006"'),
        ("", f'as {LAYOUT}: cannot parse "" as "2006"'),
        ("2026-12-01T08:00:00.123456-0200", f'as {LAYOUT}: cannot parse "-0200" as "Z07:00"'),
        (
            "2026-12-01 08:00:00.000000Z",
            f'as {LAYOUT}: cannot parse " 08:00:00.000000Z" as "T"',
        ),
        ("2026-13-01T08:00:00.000000Z", ": month out of range"),
        ("2026-02-30T08:00:00.000000Z", ": day out of range"),
        ("2026-12-01T24:00:00.000000Z", ": hour out of range"),
        ("2026-12-01T08:60:00.000000Z", ": minute out of range"),
        ("2026-12-01T08:00:00.000000Zjunk", ': extra text: "junk"'),
        ("2026-12-01T08:00:00.000000", f'as {LAYOUT}: cannot parse "" as "Z07:00"'),
        ("2026-12-01T08:00:00.123Z", f'as {LAYOUT}: cannot parse ".123Z" as ".000000"'),
        ("2026-12-01T08:00:00.000000+25:00", ": time zone offset hour out of range"),
        (
            "2026-1-01T08:00:00.000000Z",
            f'as {LAYOUT}: cannot parse "1-01T08:00:00.000000Z" as "01"',
        ),
        (
            "20x6-12-01T08:00:00.000000Z",
            f'as {LAYOUT}: cannot parse "20x6-12-01T08:00:00.000000Z" as "2006"',
        ),
        ("2026-12-01T08:00:00.1234567Z", f'as {LAYOUT}: cannot parse "7Z" as "Z07:00"'),
    ],
)
def test_refused_with_gos_parse_error(value: str, message: str) -> None:
    with pytest.raises(microtime.MicroTimeError) as raised:
        microtime.parse(value)
    assert (
        str(raised.value)
        == f'parsing time "{value}"{" " if message.startswith("as") else ""}{message}'
    )
